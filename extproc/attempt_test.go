package extproc

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
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
	memo := &metadataMemo{}
	txt := endpointText("openai", "gpt-4o")
	for range 3 {
		md := findTollway(attrs(txt), memo)
		if md["provider"] != "openai" || md["model"] != "gpt-4o" {
			t.Fatalf("metadata %v, want provider openai, model gpt-4o", md)
		}
	}
	if memo.n.Load() != 1 {
		t.Errorf("memo holds %d entries after 3 lookups of one endpoint, want 1", memo.n.Load())
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
	if memo.n.Load() != 2 {
		t.Errorf("memo holds %d entries, want 2", memo.n.Load())
	}
	// Bounded: past the cap, lookups still work but nothing more is kept.
	memo.n.Store(maxMemoized)
	if md := findTollway(attrs(endpointText("gemini", "flash")), memo); md["model"] != "flash" {
		t.Errorf("past the cap: %v", md)
	}
	if _, kept := memo.get(endpointText("gemini", "flash")); kept {
		t.Error("memo grew past its cap")
	}
	// A structured rendering (no text) works without a memo.
	st, _ := structpb.NewStruct(map[string]any{"tollway": map[string]any{"provider": "p", "model": "m"}})
	if md := findTollway(structpb.NewStructValue(st), nil); md["provider"] != "p" || md["model"] != "m" {
		t.Errorf("structured metadata: %v", md)
	}
}
