package embeddings

import "testing"

func TestCount(t *testing.T) {
	for list, want := range map[string]int{
		`[]`:                                     0,
		` [ {"embedding":[0.1,0.2]} ] `:          1,
		`[{"index":0},"AAAA",[1,[2]],null,true]`: 5,
	} {
		if n, err := count([]byte(list)); err != nil || n != want {
			t.Errorf("count(%s) = %d, %v; want %d", list, n, err, want)
		}
	}
	for _, bad := range []string{`{}`, `"x"`, `[1,`, `[1 2]`, ``} {
		if n, err := count([]byte(bad)); err == nil {
			t.Errorf("count(%s) = %d, want an error", bad, n)
		}
	}
}
