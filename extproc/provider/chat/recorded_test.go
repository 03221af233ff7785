package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand"
	"testing"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/recorded"
)

// TestRecordedCorpus feeds every recorded provider answer through its adapter, whole and split
// into random small pieces, and checks what an OpenAI client would read against the reference
// reader in test/recorded. Answers with a non-2xx status never reach a translator (the gateway
// turns them into errors itself); the end-to-end replay covers them.
func TestRecordedCorpus(t *testing.T) {
	recs, real, err := recorded.Corpus()
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case !real:
		t.Logf("recorded corpus not found (set %s or place it in ../shared/recorded): %d cases written from issue 10 only", recorded.DirEnv, len(recs))
	case len(recs) < 100:
		t.Fatalf("%d recordings, want the whole corpus (100+)", len(recs))
	}
	for _, rec := range recs {
		t.Run(rec.FullName(), func(t *testing.T) {
			if err := rec.Verdict(checkRecording(rec)); err != nil {
				t.Error(err)
			}
		})
	}
}

func translatorFor(rec *recorded.Recording) provider.ResponseTranslator {
	if rec.Provider == "anthropic" {
		return newAnthropicResponse("claude-recorded")
	}
	r := newGeminiResponse("gemini-recorded")
	r.images = rec.IsImage() // an image model's answer, as toGeminiImage reads it
	return r
}

func checkRecording(rec *recorded.Recording) error {
	exp, err := recorded.Expect(rec)
	if err != nil || exp.Status < 200 || exp.Status > 299 {
		return err
	}
	if !exp.Stream {
		out, err := translatorFor(rec).Body(rec.Raw)
		return exp.CheckBody(200, out, err)
	}
	wire := rec.Wire()
	whole := clientStream(translatorFor(rec), [][]byte{wire}, false)
	h := fnv.New64a()
	h.Write([]byte(rec.FullName()))
	rng := rand.New(rand.NewSource(int64(h.Sum64())))
	var splits [][][]byte
	if len(wire) <= 16<<10 {
		splits = append(splits, pieces(wire, func() int { return 1 }))
	}
	for range 3 {
		splits = append(splits, pieces(wire, func() int { return 1 + rng.Intn(64) }))
	}
	for i, sp := range splits {
		// The last split ends the way Envoy may end a body: an empty piece with end_of_stream.
		if got := clientStream(translatorFor(rec), sp, i == len(splits)-1); !bytes.Equal(got, whole) {
			return &splitError{n: len(sp), got: got, whole: whole}
		}
	}
	return exp.CheckStream(whole)
}

type splitError struct {
	n          int
	got, whole []byte
}

func (e *splitError) Error() string {
	i := 0
	for i < len(e.got) && i < len(e.whole) && e.got[i] == e.whole[i] {
		i++
	}
	return fmt.Sprintf("output split into %d pieces differs from the whole feed at byte %d: %q vs %q",
		e.n, i, e.got[i:min(len(e.got), i+120)], e.whole[i:min(len(e.whole), i+120)])
}

// pieces cuts b into consecutive pieces of the sizes next returns.
func pieces(b []byte, next func() int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := min(next(), len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// feedStream is what the client receives: the translator's output and, when it returns an
// error, the error event the gateway sends in its place (extproc/attempt.go), after which the
// translator is not called again.
func clientStream(tr provider.ResponseTranslator, in [][]byte, emptyEnd bool) []byte {
	if emptyEnd {
		in = append(in, nil)
	}
	var out []byte
	for i, p := range in {
		b, err := tr.Chunk(p, i == len(in)-1)
		out = append(out, b...)
		if err != nil {
			e, _ := json.Marshal(map[string]map[string]string{"error": {"message": err.Error(), "code": "upstream_error"}})
			return append(append(append(out, "data: "...), e...), "\n\n"...)
		}
	}
	return out
}
