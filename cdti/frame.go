package cdti

import (
	"errors"
	"fmt"
	"io"
)

// FrameError reports a header.length outside [MinFrameSize, MaxFrameSize]. After it the stream
// cannot be resynchronised: the connection must be closed.
type FrameError struct {
	Length uint32
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("cdti: frame length %d outside [%d, %d]", e.Length, MinFrameSize, MaxFrameSize)
}

// ReadFrame reads one message from a byte stream: the 32-byte header, then exactly
// header.length − 32 more bytes, looping over partial reads. It returns a new slice holding the
// whole message. At a clean end of stream (no byte of a new message) it returns io.EOF; a stream
// that ends inside a message gives io.ErrUnexpectedEOF; a length outside [32, 65536] gives a
// *FrameError.
func ReadFrame(r io.Reader) ([]byte, error) {
	var hdr [HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := be.Uint32(hdr[20:])
	if n < MinFrameSize || n > MaxFrameSize {
		return nil, &FrameError{Length: n}
	}
	b := make([]byte, n)
	copy(b, hdr[:])
	if _, err := io.ReadFull(r, b[HeaderSize:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// WriteFrame writes one encoded message with a single Write, after checking that its header
// length matches and lies within [32, 65536].
func WriteFrame(w io.Writer, b []byte) error {
	if len(b) < HeaderSize {
		return fmt.Errorf("cdti: write frame: %d bytes, shorter than a header", len(b))
	}
	n := be.Uint32(b[20:])
	if n < MinFrameSize || n > MaxFrameSize {
		return &FrameError{Length: n}
	}
	if int64(n) != int64(len(b)) {
		return fmt.Errorf("cdti: write frame: header length %d but %d bytes", n, len(b))
	}
	_, err := w.Write(b)
	return err
}
