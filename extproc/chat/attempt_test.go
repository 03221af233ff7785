package chat

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/core"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollway/tollway/test/fuzzcheck"
)

// Envoy 1.40 sends the endpoint's metadata as protobuf text inside the attributes.
func endpointText(provider, model string) string {
	return fmt.Sprintf(`filter_metadata { key: "envoy.lb" value { fields { key: "canary" value { bool_value: false } } } }
filter_metadata { key: "tollway" value { fields { key: "provider" value { string_value: %q } } fields { key: "model" value { string_value: %q } } } }`, provider, model)
}

func attrs(txt string) *structpb.Value {
	return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"xds.upstream_host_metadata": structpb.NewStringValue(txt),
	}})
}

func TestFindTollwayParsesTextOnceAndRemembers(t *testing.T) {
	memo := &core.MetadataMemo{}
	txt := endpointText("openai", "gpt-4o")
	for range 3 {
		md := findTollway(attrs(txt), memo)
		if md["provider"] != "openai" || md["model"] != "gpt-4o" {
			t.Fatalf("metadata %v, want provider openai, model gpt-4o", md)
		}
	}
	if memo.Len() != 1 {
		t.Errorf("memo holds %d entries after 3 lookups of one endpoint, want 1", memo.Len())
	}
	// Another endpoint is its own entry; text without our namespace is not remembered.
	if md := findTollway(attrs(endpointText("anthropic", "claude")), memo); md["provider"] != "anthropic" {
		t.Errorf("second endpoint: %v", md)
	}
	if md := findTollway(attrs(`filter_metadata { key: "envoy.lb" value { } }`), memo); md != nil {
		t.Errorf("metadata without the tollway namespace: %v, want nil", md)
	}
	if md := findTollway(attrs(`not { protobuf text`), memo); md != nil {
		t.Errorf("unparsable text: %v, want nil", md)
	}
	if memo.Len() != 2 {
		t.Errorf("memo holds %d entries, want 2", memo.Len())
	}
	// Bounded: past the cap, lookups still work but nothing more is kept.
	for i := 0; memo.Len() < core.MaxMemoized; i++ {
		memo.Put(fmt.Sprint("filler ", i), map[string]string{})
	}
	if md := findTollway(attrs(endpointText("gemini", "flash")), memo); md["model"] != "flash" {
		t.Errorf("past the cap: %v", md)
	}
	if _, kept := memo.Get(endpointText("gemini", "flash")); kept {
		t.Error("memo grew past its cap")
	}
	// A structured rendering (no text) works without a memo.
	st, _ := structpb.NewStruct(map[string]any{"tollway": map[string]any{"provider": "p", "model": "m"}})
	if md := findTollway(structpb.NewStructValue(st), nil); md["provider"] != "p" || md["model"] != "m" {
		t.Errorf("structured metadata: %v", md)
	}
}

// TestAttemptStreamErrorKeepsWhatWasTranslated: when a provider's stream turns untranslatable
// midway, the client gets the chunks translated before the fault and then one error event (with
// the request id); nothing follows it. Before, the error event replaced the chunks translated in
// the same body piece, so what the client saw depended on how Envoy cut the body (found with
// FuzzResponseStream's splitting property).
func TestAttemptStreamErrorKeepsWhatWasTranslated(t *testing.T) {
	rt := core.Compile(fuzzGateway(), nil)
	a := &Attempt{rt: rt, requestID: "req-7", provider: rt.Providers["anthropic"], model: rt.Models["claude"], streaming: true}
	up, _, err := AttemptRequest(rt, []byte(`{"model":"claude","stream":true,"messages":[{"role":"user","content":"hi"}]}`), a.model, a.provider)
	if err != nil {
		t.Fatal(err)
	}
	a.translate = up.Response
	body := func(r *extprocv3.ProcessingResponse) string {
		return string(r.GetResponseBody().GetResponse().GetBodyMutation().GetBody())
	}
	out := body(a.responseBody(&extprocv3.HttpBody{Body: []byte(
		`data: {"type":"message_start","message":{"id":"m1","model":"claude","usage":{"input_tokens":3}}}` + "\n\n" +
			`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}` + "\n\n" +
			"data: {not json}\n\n")}))
	s, err := fuzzcheck.CheckStream([]byte(out))
	if err != nil || s.Text != "Hello" || s.Error == "" || !strings.Contains(out, `"request_id":"req-7"`) {
		t.Fatalf("client got %q (%v); want the text, then an error event with the request id", out, err)
	}
	if rest := body(a.responseBody(&extprocv3.HttpBody{Body: []byte(`data: {"type":"message_stop"}` + "\n\n"), EndOfStream: true})); rest != "" {
		t.Errorf("after the error event the client got %q", rest)
	}
}
