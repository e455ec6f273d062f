package procimage

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadStatusErrorsNameTheFile: a status file that does not decode, and one that is not
// there, give errors naming the file; the second is fs.ErrNotExist.
func TestReadStatusErrorsNameTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(path, []byte("Name:\tx\nState:\t?\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := readStatus(path)
	if err == nil || !strings.Contains(err.Error(), "procimage: read "+path+": State") {
		t.Errorf("malformed status: %v, want an error naming %s and the field", err, path)
	}

	st, err := ReadStatus(os.Getpid())
	if err != nil || st.Tgid != os.Getpid() {
		t.Fatalf("own status: %+v, %v", st, err)
	}
	_, err = ReadStatus(1 << 30) // above pid_max's limit: no such process
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "/proc/1073741824/status") {
		t.Errorf("status of no process: %v, want fs.ErrNotExist naming its file", err)
	}
}
