// Package golden is the repository's one golden-file helper: tests render what they produce,
// Compare checks it against testdata, and `make testdata` (go test -update) rewrites the files
// and removes outputs no test produces any more. Test code only.
package golden

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

var update = flag.Bool("update", false, "rewrite golden files and remove outdated ones (make testdata)")

// Updating reports whether this run rewrites golden files.
func Updating() bool { return *update }

var (
	mu      sync.Mutex
	written = map[string]bool{} // absolute paths Compare saw in this run
)

// Compare fails t when got differs from the file at path, or rewrites the file with -update.
func Compare(t testing.TB, path string, got []byte) {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	written[abs] = true
	mu.Unlock()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `make testdata` to create it)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs (run `make testdata` if the change is intended, and review the diff):\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

// Prune, called after every case matching pattern has been compared, removes (with -update) or
// reports (without) the files matching pattern that no case produced: outputs of deleted or
// renamed cases must not linger as if they were still checked.
func Prune(t testing.TB, pattern string) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var stale []string
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		if !written[abs] {
			stale = append(stale, f)
		}
	}
	sort.Strings(stale)
	for _, f := range stale {
		if *update {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s is a golden output no case produces (run `make testdata` to remove it)", f)
	}
}

// Inputs lists the files matching pattern in name order; matching nothing is a broken test.
func Inputs(t testing.TB, pattern string) []string {
	t.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden inputs match %s (%v)", pattern, err)
	}
	return paths
}

// Case is a golden file's name without directory and extensions: testdata/in/basic.yaml -> basic.
func Case(path string) string {
	base := filepath.Base(path)
	if i := strings.IndexByte(base, '.'); i >= 0 {
		return base[:i]
	}
	return base
}

// YAML renders v through its JSON form as YAML with sorted keys; integers stay as written.
func YAML(v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return JSONYAML(j)
}

// ProtoYAML renders protos as stable YAML (protojson field names, sorted keys).
func ProtoYAML(ms ...proto.Message) ([]byte, error) {
	docs := make([]json.RawMessage, 0, len(ms))
	for _, m := range ms {
		j, err := protojson.Marshal(m)
		if err != nil {
			return nil, err
		}
		docs = append(docs, j)
	}
	j, err := json.Marshal(docs)
	if err != nil {
		return nil, err
	}
	return JSONYAML(j)
}

// JSONYAML renders a JSON document as YAML with sorted keys; integers stay as written.
func JSONYAML(j []byte) ([]byte, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber() // keep integers as written, not as floats
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return yaml.Marshal(numbers(v))
}

// numbers turns integral JSON numbers into integers so YAML shows 8080, not "8080".
func numbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		return t.String()
	case []any:
		for i := range t {
			t[i] = numbers(t[i])
		}
	case map[string]any:
		for k := range t {
			t[k] = numbers(t[k])
		}
	}
	return v
}

// DecodeYAML reads a YAML file into out through its JSON form, refusing unknown fields so a typo
// in a golden input fails instead of testing less than it says.
func DecodeYAML(path string, out any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return err
	}
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}
