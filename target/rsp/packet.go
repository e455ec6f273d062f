package rsp

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// Framing of the GDB remote serial protocol: a packet is `$data#cc`, where cc is the modulo-256
// sum of the data bytes in two hex digits. Inside data, `}` escapes the next byte (xor 0x20) in
// binary payloads, and `*` followed by a byte n repeats the previous byte n-29 times.

// frame kinds the reader returns.
const (
	frameAck     = '+'
	frameNak     = '-'
	framePacket  = '$'
	frameNotify  = '%'
	frameBadSum  = 'x' // a packet whose checksum did not match
	maxFrameSize = 1 << 20
)

// errFrameTooLong reports a packet longer than any stub sends.
var errFrameTooLong = errors.New("packet longer than 1 MiB")

// checksum returns the modulo-256 sum of b.
func checksum(b []byte) byte {
	var s byte
	for _, c := range b {
		s += c
	}
	return s
}

// appendFrame appends the frame for data to dst. data must not contain '$' or '#': binary
// payloads are escaped by the caller with escapeBinary.
func appendFrame(dst, data []byte) []byte {
	dst = append(dst, '$')
	dst = append(dst, data...)
	s := checksum(data)
	return append(dst, '#', hexDigits[s>>4], hexDigits[s&15])
}

const hexDigits = "0123456789abcdef"

// escapeBinary escapes the bytes of a binary payload that the framing reserves.
func escapeBinary(dst, b []byte) []byte {
	for _, c := range b {
		switch c {
		case '$', '#', '}', '*':
			dst = append(dst, '}', c^0x20)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// unescapeBinary undoes escapeBinary.
func unescapeBinary(b []byte) ([]byte, error) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '}' {
			if i+1 == len(b) {
				return nil, errors.New("binary data ends in an escape")
			}
			i++
			out = append(out, b[i]^0x20)
			continue
		}
		out = append(out, b[i])
	}
	return out, nil
}

// expandRuns undoes the run-length encoding of a received packet.
func expandRuns(b []byte) ([]byte, error) {
	i := 0
	for i < len(b) && b[i] != '*' {
		i++
	}
	if i == len(b) {
		return b, nil
	}
	out := append([]byte(nil), b[:i]...)
	for ; i < len(b); i++ {
		if b[i] != '*' {
			out = append(out, b[i])
			continue
		}
		if len(out) == 0 || i+1 == len(b) {
			return nil, errors.New("bad run-length encoding")
		}
		n := int(b[i+1]) - 29
		if n < 0 {
			return nil, fmt.Errorf("bad run length %q", b[i+1])
		}
		last := out[len(out)-1]
		for ; n > 0; n-- {
			out = append(out, last)
		}
		i++
	}
	return out, nil
}

// readFrame reads the next frame: an ack, a nak, or a packet (data already run-length
// expanded). Bytes outside frames (line noise, a stray 0x03) are skipped.
func readFrame(r *bufio.Reader) (kind byte, data []byte, err error) {
	for {
		c, err := r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		switch c {
		case '+', '-':
			return c, nil, nil
		case '$', '%':
			kind = c
		default:
			continue
		}
		var raw []byte
		for {
			b, err := r.ReadByte()
			if err != nil {
				return 0, nil, err
			}
			if b == '#' {
				break
			}
			if len(raw) == maxFrameSize {
				return 0, nil, errFrameTooLong
			}
			raw = append(raw, b)
		}
		var sum [2]byte
		if _, err := ioReadFull(r, sum[:]); err != nil {
			return 0, nil, err
		}
		want, err := strconv.ParseUint(string(sum[:]), 16, 8)
		if err != nil || byte(want) != checksum(raw) {
			return frameBadSum, raw, nil
		}
		data, err := expandRuns(raw)
		if err != nil {
			return frameBadSum, raw, nil
		}
		return kind, data, nil
	}
}

// ioReadFull reads exactly len(b) bytes from r.
func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	for i := range b {
		c, err := r.ReadByte()
		if err != nil {
			return i, err
		}
		b[i] = c
	}
	return len(b), nil
}

// hexUint parses a hexadecimal number.
func hexUint(s string) (uint64, error) { return strconv.ParseUint(s, 16, 64) }

// decodeHex decodes hex-encoded bytes.
func decodeHex(s []byte) ([]byte, error) {
	out := make([]byte, hex.DecodedLen(len(s)))
	_, err := hex.Decode(out, s)
	return out, err
}
