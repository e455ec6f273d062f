package procimage_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/procimage"
)

// TestCStringBounds reads a string that ends on the last byte of the only mapped page (no
// read may touch the unmapped page after it), a string longer than its bound, an unterminated
// one running into unmapped memory, and a null pointer.
func TestCStringBounds(t *testing.T) {
	page := bytes.Repeat([]byte{'x'}, 4096)
	copy(page[4096-6:], "/a.so\x00")
	copy(page[100:], "short\x00")
	im := procimage.Image{Mem: blob{base, page}, Layout: procimage.Layout{Order: binary.BigEndian, PtrSize: 4}}
	if s, err := im.CString(base+4096-6, 4096); s != "/a.so" || err != nil {
		t.Errorf("string at the end of the page = %q, %v", s, err)
	}
	if s, err := im.CString(base+100, 4096); s != "short" || err != nil {
		t.Errorf("short string = %q, %v", s, err)
	}
	if s, err := im.CString(base+106, 10); err == nil || !strings.Contains(err.Error(), "longer than 10 bytes") {
		t.Errorf("string over its bound = %q, %v", s, err)
	}
	copy(page[4096-6:], "/a.so!")
	if s, err := im.CString(base+4096-6, 4096); err == nil {
		t.Errorf("unterminated string into unmapped memory = %q, no error", s)
	}
	if s, err := im.CString(0, 4096); s != "" || err != nil {
		t.Errorf("null pointer = %q, %v", s, err)
	}
}
