package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/test/fakeupstream"
)

// A reasoning model's stream cut while it thinks: OpenAI-compatible servers stream the thinking
// as reasoning_content (DeepSeek, vLLM) or reasoning (OpenRouter, Ollama) deltas before the
// answer's text, and bill it as output. A client that asks for long thinking and cuts the stream
// before the answer starts must be billed the reasoning that passed, on either lane.

// thinking is a reasoning model's thinking: 112 words, streamed a word a chunk.
var thinking = strings.Repeat("First I should check whether the premise holds, then weigh each option in turn. ", 8)

// reasoningOf is the reasoning text of a stream's events, as the client got it.
func reasoningOf(t *testing.T, events []string) string {
	t.Helper()
	var got strings.Builder
	for _, ev := range events {
		var c struct {
			Choices []struct{ Delta openai.Delta }
		}
		if json.Unmarshal([]byte(ev), &c) != nil {
			continue // [DONE], the gateway's error event
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil && *ch.Delta.Content != "" {
				t.Fatalf("the answer's text passed (%q): the stream must be cut while the model thinks", *ch.Delta.Content)
			}
			got.WriteString(ch.Delta.ReasoningFields.Text())
		}
	}
	return got.String()
}

// reasoningBill is what one lane billed a case, and the reasoning the client got.
type reasoningBill struct {
	rec  usageRecord
	got  string
	lane string
}

// TestCutStreamDuringReasoningIsBilled: on the fast lane and the chunk lane, a stream the
// provider cuts during reasoning (under either name) and one the client hangs up on while the
// model thinks are billed an estimate that counts the reasoning that passed, by each lane's rule
// (the chunk lane's tokenizer; the fast lane's 3 bytes a token), where both billed about 0
// completion tokens (the fast lane its meter's lag alone, 22 for 453 bytes passed); a
// reasoning stream that ends with the provider's usage is billed that usage, exact, the same on
// both lanes.
func TestCutStreamDuringReasoningIsBilled(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	bills := map[string][]reasoningBill{} // case -> each lane's bill
	t.Run("lanes", func(t *testing.T) {
		for _, fast := range []bool{true, false} {
			lane := map[bool]string{true: "fast", false: "chunk"}[fast]
			t.Run(lane, func(t *testing.T) {
				t.Parallel()
				// A pause between chunks, so that Envoy reads them one by one and a client can
				// hang up mid-stream.
				g, fake := startLane(t, fast, fakeupstream.Options{ChunkDelay: 3 * time.Millisecond})
				ctx := context.Background()
				body := `{"model":"priced","stream":true,"messages":[{"role":"user","content":"Is the premise sound?"}]}`
				run := func(name string, f fakeupstream.Fault, hangUpAfter int) {
					if err := g.NewAccount(ctx, name, "25"); err != nil {
						t.Fatal(err)
					}
					fake.Script(f)
					cctx, cancel := context.WithCancel(ctx)
					defer cancel()
					resp := g.chat(cctx, g.newKey(name), body)
					var events []string
					sc := bufio.NewScanner(resp.Body)
					for sc.Scan() && (hangUpAfter == 0 || len(events) < hangUpAfter) {
						if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
							events = append(events, d)
						}
					}
					cancel() // a client that hangs up; else the stream already ended
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					b := reasoningBill{rec: g.waitRecords(name, 1)[0], lane: lane}
					if name != "whole" {
						b.got = reasoningOf(t, events)
					}
					mu.Lock()
					bills[name] = append(bills[name], b)
					mu.Unlock()
				}
				run("cut_reasoning_content", fakeupstream.Fault{Reasoning: thinking, Cut: true, CutAfter: 80}, 0)
				run("cut_reasoning", fakeupstream.Fault{Reasoning: thinking, ReasoningField: "reasoning", Cut: true, CutAfter: 80}, 0)
				run("client_gone", fakeupstream.Fault{Reasoning: thinking}, 60)
				run("whole", fakeupstream.Fault{Reasoning: thinking}, 0)
			})
		}
	})
	if t.Failed() {
		return
	}
	for name, lanes := range bills {
		for _, b := range lanes {
			r := b.rec
			t.Logf("%s, %s lane: %d bytes of reasoning reached the client (%d tokens), billed %d completion tokens (estimated %v)",
				name, b.lane, len(b.got), billing.CountText(b.got), r.CompletionTokens, r.Estimated)
			if name == "whole" {
				// The provider's usage is the bill: 112 reasoning tokens and the answer's 7.
				if r.Estimated || r.CompletionTokens != 112+7 || r.PromptTokens != 4 {
					t.Errorf("a whole reasoning stream on the %s lane was billed %+v: want the provider's usage, 119 completion tokens, exact", b.lane, r)
				}
				continue
			}
			if len(b.got) < 200 {
				t.Fatalf("%s, %s lane: the client got %d bytes of reasoning: the test needs most of it", name, b.lane, len(b.got))
			}
			if !r.Estimated || r.PromptTokens == 0 {
				t.Errorf("%s, %s lane: billed %+v: want an estimate", name, b.lane, r)
			}
			var floor int64
			if b.lane == "chunk" {
				floor = int64(billing.CountText(b.got)) // the meter read all the client got
			} else {
				floor = billing.TokensFromBytes(int64(len(b.got))) // a cut's lag is billed on top
			}
			if r.CompletionTokens < floor {
				t.Errorf("%s, %s lane: a stream cut during reasoning was billed %d completion tokens for %d bytes of reasoning passed: want at least %d",
					name, b.lane, r.CompletionTokens, len(b.got), floor)
			}
		}
	}
	// The same cut stream gets the same class of bill on both lanes: estimated, and the fast
	// lane's bytes/3 at least a third of the chunk lane's count (a token is never under a byte).
	for _, name := range []string{"cut_reasoning_content", "cut_reasoning"} {
		var fast, chunk usageRecord
		for _, b := range bills[name] {
			if b.lane == "fast" {
				fast = b.rec
			} else {
				chunk = b.rec
			}
		}
		if fast.Estimated != chunk.Estimated || 3*fast.CompletionTokens < chunk.CompletionTokens {
			t.Errorf("%s: the lanes billed the same cut stream apart: fast %+v, chunk %+v", name, fast, chunk)
		}
	}
}
