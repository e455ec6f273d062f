# apt-sources.sh: sourced by the scripts that derive package sources from this machine's
# own apt configuration (qemu-user.sh, debian13-root.sh). POSIX sh.

# Debian entries of the machine's sources, one per line: URI SUITE KEYRING. Both the one-line
# format (sources.list, *.list) and deb822 (*.sources) are read; disabled files are skipped.
list_sources() {
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		awk '
		$1 == "deb" {
			key = ""; i = 2
			if ($2 ~ /^\[/) {
				opts = ""
				for (; i <= NF; i++) { opts = opts " " $i; if ($i ~ /\]$/) { i++; break } }
				if (match(opts, /signed-by=[^] ]+/)) key = substr(opts, RSTART + 10, RLENGTH - 10)
			}
			uri = $i; suite = $(i + 1); main = 0
			for (j = i + 2; j <= NF; j++) if ($j == "main") main = 1
			if (main) print uri, suite, (key == "" ? "-" : key)
		}' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		awk '
		function flush(   n, m, u, s, i, j) {
			if (types ~ /(^| )deb( |$)/ && comps ~ /(^| )main( |$)/ && enabled != "no") {
				n = split(uris, u, " "); m = split(suites, s, " ")
				for (i = 1; i <= n; i++) for (j = 1; j <= m; j++)
					print u[i], s[j], (key == "" ? "-" : key)
			}
			types = uris = suites = comps = key = enabled = ""
		}
		/^[ \t]*#/ { next }
		/^[ \t]*$/ { flush(); next }
		{
			field = tolower($1); sub(/:$/, "", field)
			value = $0; sub(/^[^:]*:[ \t]*/, "", value)
			if (field == "types") types = value
			else if (field == "uris") uris = value
			else if (field == "suites") suites = value
			else if (field == "components") comps = value
			else if (field == "signed-by") key = value
			else if (field == "enabled") enabled = tolower(value)
		}
		END { flush() }' "$f"
	done
}
