package chat

// Fuzz target of the SSE framer the translators read provider streams with (sseReader.feed).

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tollway/tollway/test/fuzzcheck"
)

// FuzzSSEReader frames arbitrary bytes fed whole and in fuzzed pieces: the events' data are
// the same, and a callback's error stops it at the same event, however the stream was cut
// (inside CRLF pairs, multi-byte characters, "data:").
func FuzzSSEReader(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*/stream/*.in.sse")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, []byte{5, 1, 2}, false)
		f.Add(bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")), []byte{0}, true)
	}
	f.Add([]byte("data: a\r\ndata: b\r\n\r\n: comment\n\nevent: x\ndata:\n\ndata: {\"é\":1}"), []byte{0, 1}, true)
	f.Fuzz(func(t *testing.T, in, cuts []byte, endAlone bool) {
		whole, wholeErr := frame([][]byte{in}, endAlone)
		got, err := frame(fuzzcheck.Pieces(in, cuts), endAlone)
		if (err == nil) != (wholeErr == nil) || !slices.EqualFunc(got, whole, bytes.Equal) {
			t.Fatalf("cut into pieces the events differ:\n%q (%v)\nwhole:\n%q (%v)", got, err, whole, wholeErr)
		}
	})
}

// frame feeds pieces to one sseReader and returns the data of the events it delivered, up to
// the first error a callback returns (events whose data is "!" fail, to check that errors stop
// the framing at the same event however the stream was cut).
func frame(pieces [][]byte, endAlone bool) ([][]byte, error) {
	var r sseReader
	var out [][]byte
	if endAlone || len(pieces) == 0 {
		pieces = append(pieces, nil)
	}
	for i, p := range pieces {
		err := r.feed(p, i == len(pieces)-1, func(data []byte) error {
			if string(data) == "!" {
				return errStop
			}
			out = append(out, bytes.Clone(data))
			return nil
		})
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

var errStop = errors.New("stop")
