// Package recorded loads the corpus of recorded provider answers (Anthropic Messages and Gemini
// generateContent, streamed and not) and judges what the gateway made of them. It reads each
// recording with a reference reader of its own, written from the providers' documented formats
// and sharing no code with extproc/provider, and checks an OpenAI chat answer against it: the
// provider adapters' corpus test and the end-to-end replay through Envoy use the same checks.
package recorded

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DirEnv names the environment variable that points at the corpus directory (the one holding
// anthropic/ and gemini/).
const DirEnv = "TOLLWAY_RECORDED_DIR"

// Recording is one provider answer as it was recorded.
type Recording struct {
	Provider string // "anthropic" or "gemini"
	Name     string // file name without its extension
	Meta     Meta
	Raw      []byte // the .body file as stored
}

// Meta is a recording's sidecar <name>.meta.json: where it comes from and how to replay it.
type Meta struct {
	SourceRepo  string   `json:"source_repo"`
	Path        string   `json:"path"`
	Commit      string   `json:"commit"`
	License     string   `json:"license"`
	Interaction *int     `json:"interaction,omitempty"` // index in a VCR cassette
	Status      int      `json:"status"`
	ContentType string   `json:"content_type"`
	Stream      bool     `json:"stream"`
	Format      string   `json:"format"`   // "json", "sse", or "jsonl": one event's data per line, framing stripped by the recorder
	Upstream    string   `json:"upstream"` // anthropic, gemini-api or vertex
	Kinds       []string `json:"kinds"`
	Notes       string   `json:"notes"`
	// ShapeOf, on a case written rather than recorded, names the public recording whose shape
	// and usage counts it reproduces (written anew: recordings stay out of this repository).
	ShapeOf *Source `json:"shape_of,omitempty"`
}

// Source is a file of a public repository at a commit.
type Source struct {
	Repo    string `json:"repo"`
	Path    string `json:"path"`
	Commit  string `json:"commit"`
	License string `json:"license"`
}

// FullName is provider/name, unique in the corpus.
func (r *Recording) FullName() string { return r.Provider + "/" + r.Name }

// Wire is the body as the provider sent it. Recordings kept as JSON lines get the provider's
// framing back: Anthropic names each event after its type; Gemini frames with CRLF, as the
// recordings that kept their framing show.
func (r *Recording) Wire() []byte {
	if r.Meta.Format != "jsonl" {
		return r.Raw
	}
	var b strings.Builder
	for _, line := range strings.Split(string(r.Raw), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if r.Provider == "anthropic" {
			var ev struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal([]byte(line), &ev)
			b.WriteString("event: " + ev.Type + "\ndata: " + line + "\n\n")
		} else {
			b.WriteString("data: " + line + "\r\n\r\n")
		}
	}
	return []byte(b.String())
}

// Dir finds the recorded corpus: $TOLLWAY_RECORDED_DIR, else recorded/ in the shared folder
// beside the repository. It reports "" when there is none: the recordings are fetched material,
// which stays out of this repository's commits.
func Dir() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		if _, err := os.Stat(filepath.Join(d, "SOURCES.md")); err != nil {
			return "", fmt.Errorf("recorded: %s=%s holds no corpus (no SOURCES.md)", DirEnv, d)
		}
		return d, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	d := filepath.Join(root, "..", "shared", "recorded")
	if _, err := os.Stat(filepath.Join(d, "SOURCES.md")); err != nil {
		return "", nil
	}
	return d, nil
}

// moduleRoot is the directory of go.mod above the working directory.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("recorded: no go.mod above the working directory")
		}
	}
}

// Load reads every recording under dir/anthropic and dir/gemini, sorted by name.
func Load(dir string) ([]*Recording, error) {
	var out []*Recording
	for _, prov := range []string{"anthropic", "gemini"} {
		metas, err := filepath.Glob(filepath.Join(dir, prov, "*.meta.json"))
		if err != nil {
			return nil, err
		}
		for _, m := range metas {
			name := strings.TrimSuffix(filepath.Base(m), ".meta.json")
			r := &Recording{Provider: prov, Name: name}
			mb, err := os.ReadFile(m)
			if err != nil {
				return nil, err
			}
			if err := json.Unmarshal(mb, &r.Meta); err != nil {
				return nil, fmt.Errorf("recorded: %s: %w", m, err)
			}
			if r.Raw, err = os.ReadFile(filepath.Join(dir, prov, name+".body")); err != nil {
				return nil, err
			}
			if r.Meta.Status == 0 || r.Meta.SourceRepo == "" || r.Meta.Commit == "" {
				return nil, fmt.Errorf("recorded: %s: status, source_repo and commit are required", m)
			}
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FullName() < out[j].FullName() })
	if len(out) == 0 {
		return nil, fmt.Errorf("recorded: no recordings in %s", dir)
	}
	return out, nil
}

// Corpus loads the cases written from issue 10 (test/recorded/testdata, always there) and the
// recorded corpus Dir finds, when there is one; recorded reports whether it was found. It checks
// that KnownFailing names only recordings it loaded.
func Corpus() (recs []*Recording, recorded bool, err error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, false, err
	}
	if recs, err = Load(filepath.Join(root, "test", "recorded", "testdata")); err != nil {
		return nil, false, err
	}
	dir, err := Dir()
	if err != nil {
		return nil, false, err
	}
	if dir != "" {
		more, err := Load(dir)
		if err != nil {
			return nil, false, err
		}
		recs = append(recs, more...)
	}
	return recs, dir != "", CheckKnownFailing(recs)
}
