module github.com/hpcdap/hpcdap

go 1.26.0

require (
	github.com/google/go-dap v0.12.0
	github.com/sourcegraph/jsonrpc2 v0.2.3
	golang.org/x/arch v0.32.0
	golang.org/x/sys v0.49.0
)
