module github.com/hpcdap/hpcdap

go 1.26.0

require golang.org/x/arch v0.32.0

require (
	github.com/go-delve/delve v1.27.2 // indirect
	github.com/google/go-dap v0.12.0 // indirect
	github.com/sourcegraph/jsonrpc2 v0.2.3 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
