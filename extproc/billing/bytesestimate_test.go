package billing_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/test/recorded"
)

func TestTokensFromBytes(t *testing.T) {
	for _, tc := range []struct{ n, want int64 }{
		{-5, 0}, {0, 0}, {1, 1}, {3, 1}, {4, 2}, {6, 2}, {7, 3}, {3000, 1000},
		{math.MaxInt64, math.MaxInt64/billing.BytesPerToken + 1},
	} {
		if got := billing.TokensFromBytes(tc.n); got != tc.want {
			t.Errorf("TokensFromBytes(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// TestBytesPerToken runs today's tokenizer over the recorded answers the repository holds (the
// cases of test/recorded, the recorded corpus too when it is there, and the provider adapters'
// answers), prints how many bytes a token covers in each, and checks the property
// BytesPerToken was chosen for: it under-bills at most a tenth of the answers.
func TestBytesPerToken(t *testing.T) {
	answers := recordedAnswers(t)
	if len(answers) < 30 {
		t.Fatalf("%d recorded answers: the corpus is gone", len(answers))
	}
	var ratios []float64
	var under []string
	var size, tokens, estimated int64
	for _, a := range answers {
		c, n := int64(len(a.text)), int64(billing.CountText(a.text))
		ratios = append(ratios, float64(c)/float64(n))
		size, tokens, estimated = size+c, tokens+n, estimated+billing.TokensFromBytes(c)
		if billing.TokensFromBytes(c) < n {
			under = append(under, fmt.Sprintf("%s (%d bytes, %d tokens)", a.name, c, n))
		}
	}
	slices.Sort(ratios)
	pct := func(p float64) float64 { return ratios[int(p*float64(len(ratios)-1))] }
	t.Logf("%d answers, bytes per token: p5 %.2f p10 %.2f p25 %.2f p50 %.2f p75 %.2f p90 %.2f; all their text %.2f (%d bytes, %d tokens)",
		len(answers), pct(0.05), pct(0.10), pct(0.25), pct(0.50), pct(0.75), pct(0.90), float64(size)/float64(tokens), size, tokens)
	t.Logf("at %d bytes a token: %d answers under-billed %v; %d tokens estimated for %d (%+.0f%%)",
		billing.BytesPerToken, len(under), under, estimated, tokens, 100*float64(estimated-tokens)/float64(tokens))
	if len(under) > len(answers)/10 {
		t.Errorf("%d bytes a token under-bills %d of %d answers, more than a tenth", billing.BytesPerToken, len(under), len(answers))
	}
}

// TestBytesEstimateBound: whatever the script, the estimate is at least a third of the
// tokenizer's count (a token spans at least a byte), where a count of characters let text of
// many tokens a character be billed as little as a twelfth.
func TestBytesEstimateBound(t *testing.T) {
	for _, s := range []string{
		"Hello, world. A plain English sentence, as most answers are.",
		"这是一个关于人工智能的测试句子，我们想看看分词器如何处理中文文本。",
		"日本語のテキストはどのようにトークン化されますか。",
		"Привет, как дела? Это тестовое предложение на русском языке.",
		"😀😃😄😁😆😅🤣😂🙂🙃😉😊😇🥰😍🤩",
		"ℵℶℷℸ⅀⅁⅂⅃⅄ⅅⅆⅇⅈⅉ⅊⅋⅌⅍ⅎ",
		"𓀀𓀁𓀂𓀃𓀄𓀅𓀆𓀇𓀈𓀉",
		"ꙮꙮꙮꙮꙮꙮꙮꙮꙮꙮ",
		"a̷̢̛̛b̸̡̛c̶̢̛d̷̨̛e̵̡̛",
		"~`^|~`^|}{][\\\\@#$%^&*",
	} {
		n, est := int64(billing.CountText(s)), billing.TokensFromBytes(int64(len(s)))
		t.Logf("%d characters, %d bytes: %d tokens, estimated %d (counted in characters: %d): %s",
			utf8.RuneCountInString(s), len(s), n, est, billing.TokensFromBytes(int64(utf8.RuneCountInString(s))), s)
		if 3*est < n {
			t.Errorf("%q: estimated %d tokens of %d, under a third", s, est, n)
		}
	}
}

type answer struct{ name, text string }

// recordedAnswers is the text of every successful recorded answer: what the stream meter would
// count of it (text, tool-call names and arguments).
func recordedAnswers(t *testing.T) []answer {
	recs, _, err := recorded.Corpus()
	if err != nil {
		t.Fatal(err)
	}
	var out []answer
	for _, r := range recs {
		e, err := recorded.Expect(r)
		if err != nil {
			t.Fatalf("%s: %v", r.FullName(), err)
		}
		text := e.Text
		for _, c := range e.Calls {
			text += c.Name + string(c.Args)
		}
		if !e.Fails && text != "" {
			out = append(out, answer{r.FullName(), text})
		}
	}
	// The provider adapters' answers, as OpenAI clients get them: whole, and streamed.
	files, err := filepath.Glob(filepath.Join("..", "provider", "chat", "testdata", "*", "*", "*.out.*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if text := openAIText(t, f, b); text != "" {
			out = append(out, answer{filepath.ToSlash(f), text})
		}
	}
	return out
}

// openAIText is the text of an OpenAI chat answer, a chat.completion or its chunks' stream.
func openAIText(t *testing.T, name string, b []byte) string {
	type toolCalls []struct {
		Function struct{ Name, Arguments string }
	}
	var text strings.Builder
	add := func(content *string, calls toolCalls) {
		if content != nil {
			text.WriteString(*content)
		}
		for _, c := range calls {
			text.WriteString(c.Function.Name + c.Function.Arguments)
		}
	}
	if !strings.HasSuffix(name, ".sse") {
		var whole struct {
			Choices []struct {
				Message struct {
					Content   *string
					ToolCalls toolCalls `json:"tool_calls"`
				}
			}
		}
		if err := json.Unmarshal(b, &whole); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, c := range whole.Choices {
			add(c.Message.Content, c.Message.ToolCalls)
		}
		return text.String()
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || !strings.HasPrefix(data, "{") {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   *string
					ToolCalls toolCalls `json:"tool_calls"`
				}
			}
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, c := range chunk.Choices {
			add(c.Delta.Content, c.Delta.ToolCalls)
		}
	}
	return text.String()
}
