package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand"
	"testing"

	"github.com/tollway/tollway/test/recorded"
)

// knownFailing lists the recordings the adapters still get wrong, each with the defect it
// shows. They run like the others and the test asserts they still fail: a fix that makes one
// pass must take it off the list.
//
// TO EMPTY when the fixes of issue 10 land.
var knownFailing = map[string]string{
	"anthropic/pydantic-test_anthropic_compaction_usage_with_cache_streaming-0":                        zeroDefect,
	"anthropic/vercel-anthropic-programmatic-tool-calling.1.stream.answer10":                           startDefect,
	"anthropic/vercel-anthropic-programmatic-tool-calling.1.stream.answer11":                           startDefect,
	"anthropic/vercel-anthropic-programmatic-tool-calling.1.stream.answer12":                           startDefect,
	"anthropic/vercel-anthropic-programmatic-tool-calling.1.stream.answer13":                           startDefect,
	"anthropic/vercel-anthropic-programmatic-tool-calling.1.stream.answer14":                           startDefect,
	"anthropic/vercel-anthropic-programmatic-tool-calling.1.stream.answer2":                            startDefect,
	"anthropic/vercel-anthropic-programmatic-tool-calling.1.stream.answer3":                            startDefect,
	"anthropic/vercel-anthropic-programmatic-tool-calling.1.stream.answer4":                            startDefect,
	"anthropic/vercel-anthropic-programmatic-tool-calling.1.stream.answer5":                            startDefect,
	"anthropic/vercel-anthropic-programmatic-tool-calling.1.stream.answer6":                            startDefect,
	"anthropic/vercel-anthropic-programmatic-tool-calling.1.stream.answer7":                            startDefect,
	"anthropic/vercel-anthropic-programmatic-tool-calling.1.stream.answer8":                            startDefect,
	"anthropic/vercel-anthropic-programmatic-tool-calling.1.stream.answer9":                            startDefect,
	"gemini/pydantic-test_anthropic_to_google_deferred_capability_history_replay-3":                    reasoningDefect,
	"gemini/pydantic-test_auto_mode_with_function_and_builtin_tools-1":                                 reasoningDefect,
	"gemini/pydantic-test_cancel_recorded_provider_stream_google_-0":                                   reasoningDefect,
	"gemini/pydantic-test_code_execution-0":                                                            reasoningDefect,
	"gemini/pydantic-test_code_execution-1":                                                            reasoningDefect,
	"gemini/pydantic-test_code_execution_stream-0":                                                     reasoningDefect,
	"gemini/pydantic-test_function_tools_with_builtin_tools-1":                                         reasoningDefect,
	"gemini/pydantic-test_google_instructions_only_with_tool_calls-0":                                  reasoningDefect,
	"gemini/pydantic-test_google_instructions_only_with_tool_calls-1":                                  reasoningDefect,
	"gemini/pydantic-test_google_model_armor_response_template_real_block-0":                           reasoningDefect,
	"gemini/pydantic-test_google_model_file_search_grounding_gemini_3_False_-3":                        reasoningDefect,
	"gemini/pydantic-test_google_model_file_search_grounding_gemini_3_False_-4":                        reasoningDefect,
	"gemini/pydantic-test_google_model_file_search_grounding_gemini_3_True_-3":                         reasoningDefect,
	"gemini/pydantic-test_google_model_file_search_tool_stream-3":                                      reasoningDefect,
	"gemini/pydantic-test_google_model_max_tokens_thinking_model_empty_response-0":                     reasoningDefect,
	"gemini/pydantic-test_google_model_mobile_youtube_video_url_input-0":                               reasoningDefect,
	"gemini/pydantic-test_google_model_thinking_part-0":                                                reasoningDefect,
	"gemini/pydantic-test_google_model_thinking_part-1":                                                reasoningDefect,
	"gemini/pydantic-test_google_model_thinking_part_iter-0":                                           reasoningDefect,
	"gemini/pydantic-test_google_model_web_fetch_tool_stream-0":                                        reasoningDefect,
	"gemini/pydantic-test_google_model_web_search_tool_stream-0":                                       reasoningDefect,
	"gemini/pydantic-test_google_stream_usage_is_live_mid_stream-0":                                    reasoningDefect,
	"gemini/pydantic-test_google_streaming_tool_call_thought_signature-0":                              reasoningDefect,
	"gemini/pydantic-test_google_vertex_logprobs-0":                                                    reasoningDefect,
	"gemini/pydantic-test_google_vertex_logprobs_from_provider_details-0":                              reasoningDefect,
	"gemini/pydantic-test_google_vertex_service_tier_flex_stream-0":                                    reasoningDefect,
	"gemini/pydantic-test_google_vertex_tool_combination_omits_include_server_side_tool_invocations-0": reasoningDefect,
	"gemini/pydantic-test_google_vertex_tool_combination_omits_include_server_side_tool_invocations-1": reasoningDefect,
	"gemini/pydantic-test_mixed_content_ordering_google_2_5_-1":                                        reasoningDefect,
	"gemini/pydantic-test_mixed_content_ordering_google_vertex_-0":                                     reasoningDefect,
	"gemini/pydantic-test_mixed_content_ordering_google_vertex_-1":                                     reasoningDefect,
	"gemini/pydantic-test_multimodal_tool_return_matrix_direct-binary-audio-google_vertex_-0":          reasoningDefect,
	"gemini/pydantic-test_multimodal_tool_return_matrix_direct-binary-audio-google_vertex_-1":          reasoningDefect,
	"gemini/pydantic-test_multimodal_tool_return_matrix_direct-uploaded_file-video-google_vertex_-0":   reasoningDefect,
	"gemini/pydantic-test_native_output_with_builtin_tools-0":                                          reasoningDefect,
	"gemini/pydantic-test_native_output_with_builtin_tools_stream-0":                                   reasoningDefect,
	"gemini/pydantic-test_native_output_with_function_tools_stream-0":                                  reasoningDefect,
	"gemini/pydantic-test_native_output_with_function_tools_stream-1":                                  reasoningDefect,
	"gemini/pydantic-test_ref_sibling_wire_contract_google-structured-dict_-0":                         reasoningDefect,
	"gemini/pydantic-test_tool_availability_portability_matrix_R1-T5-local-search_-0":                  reasoningDefect,
	"gemini/pydantic-test_tool_availability_portability_matrix_R2-T5-local-search_-0":                  reasoningDefect,
	"gemini/vercel-google-reasoning":                                                                   reasoningDefect,
	"gemini/vercel-google-reasoning-gemini3":                                                           reasoningDefect,
	"gemini/vercel-google-reasoning-gemini3.stream":                                                    reasoningDefect,
	"gemini/vercel-google-reasoning.stream":                                                            reasoningDefect,
	"gemini/vercel-google-stream-no-args-tool-call.stream":                                             partialDefect,
	"gemini/vercel-google-stream-tool-call-arguments.stream":                                           partialDefect,
	"gemini/vercel-google-stream-tool-call-array-arguments-missing-terminal-function-call.stream":      partialDefect,
	"gemini/vercel-google-text":                                                                        reasoningDefect,
	"gemini/vercel-google-text.stream":                                                                 reasoningDefect,
	"gemini/vercel-google-tool-call":                                                                   reasoningDefect,
	"gemini/vercel-google-tool-call-gemini3":                                                           reasoningDefect,
	"gemini/vercel-google-tool-call-gemini3.stream":                                                    reasoningDefect,
	"gemini/vercel-google-tool-call.stream":                                                            reasoningDefect,
	"gemini/vercel-google-vertex-stream-tool-call-arguments-nested.1.stream":                           partialDefect,
}

// The defects the recordings in knownFailing show today.
const (
	reasoningDefect = "no completion_tokens_details.reasoning_tokens for Gemini's thoughtsTokenCount"
	zeroDefect      = "Anthropic usage ignores a count that drops to 0 (cache_read_input_tokens 55096 in message_start, 0 in message_delta)"
	startDefect     = "Anthropic message_start carrying the whole message (tool_use content, stop_reason tool_use: a resumed programmatic tool call) is ignored: no tool call, finish stop"
	partialDefect   = "Gemini 3 streamed function-call arguments (functionCall.partialArgs, willContinue) become separate nameless calls (these also lack reasoning_tokens)"
)

// TestRecordedCorpus feeds every recorded provider answer through its adapter, whole and split
// into random small pieces, and checks what an OpenAI client would read against the reference
// reader in test/recorded. Answers with a non-2xx status never reach a translator (the gateway
// turns them into errors itself); the end-to-end replay covers them.
func TestRecordedCorpus(t *testing.T) {
	dir, err := recorded.Dir()
	if err != nil {
		t.Fatal(err)
	}
	recs, err := recorded.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 100 {
		t.Fatalf("%d recordings in %s, want the whole corpus (100+)", len(recs), dir)
	}
	seen := map[string]bool{}
	for _, rec := range recs {
		seen[rec.FullName()] = true
		t.Run(rec.FullName(), func(t *testing.T) {
			err := checkRecording(rec)
			switch defect, known := knownFailing[rec.FullName()]; {
			case known && err == nil:
				t.Errorf("listed in knownFailing (%s) but passes now: take it off the list", defect)
			case !known && err != nil:
				t.Errorf("%v\n(source %s %s@%s)", err, rec.Meta.SourceRepo, rec.Meta.Path, rec.Meta.Commit[:12])
			}
		})
	}
	for name := range knownFailing {
		if !seen[name] {
			t.Errorf("knownFailing names %s, which is not in the corpus", name)
		}
	}
}

func translatorFor(rec *recorded.Recording) ResponseTranslator {
	if rec.Provider == "anthropic" {
		return newAnthropicResponse("claude-recorded")
	}
	return newGeminiResponse("gemini-recorded")
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
func clientStream(tr ResponseTranslator, in [][]byte, emptyEnd bool) []byte {
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
