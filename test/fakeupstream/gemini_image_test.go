package fakeupstream

import (
	"bytes"
	"encoding/base64"
	"image/png"
	"strings"
	"testing"
)

// TestGeminiImageFake: the image fake answers with real PNGs in inlineData (the bytes
// GeminiImageFor names, sized by imageConfig), usage as the real API writes it (only the
// IMAGE entry listed by modality), and refuses what the
// real API refuses: the spec's responseFormat, a size the model lacks, a missing key.
func TestGeminiImageFake(t *testing.T) {
	s := Start(t, Options{APIKey: "k"})
	body := `{"contents":[{"role":"user","parts":[{"text":"a fox"}]}],"generationConfig":{"responseModalities":["TEXT","IMAGE"],"imageConfig":{"aspectRatio":"16:9","imageSize":"2K"}}}`
	resp := postGemini(t, s, "k", "gemini-3-pro-image-preview:generateContent", body)
	out := decode[struct {
		Candidates []struct {
			Content struct {
				Parts []struct {
					Text       string
					Thought    bool
					InlineData *struct{ MimeType, Data string }
				}
			}
			FinishReason string
		}
		UsageMetadata struct {
			CandidatesTokenCount    int
			ThoughtsTokenCount      int
			CandidatesTokensDetails []struct {
				Modality   string
				TokenCount int
			}
		}
	}](t, resp)
	parts := out.Candidates[0].Content.Parts
	if len(parts) != 4 || !parts[0].Thought || !parts[1].Thought || parts[2].Text != "Here is your image: a fox" || parts[3].InlineData == nil {
		t.Fatalf("parts %+v", parts)
	}
	got, _ := base64.StdEncoding.DecodeString(parts[3].InlineData.Data)
	want, mime := GeminiImageFor("a fox", "16:9", "2K", 0)
	cfg, err := png.DecodeConfig(bytes.NewReader(got))
	if !bytes.Equal(got, want) || mime != "image/png" || err != nil || cfg.Width != 128 || cfg.Height != 72 {
		t.Fatalf("image %v %dx%d", err, cfg.Width, cfg.Height)
	}
	// As the real API: the text counts in candidatesTokenCount, only the IMAGE entry is listed.
	u := out.UsageMetadata
	if u.CandidatesTokenCount != 6+1120 || u.ThoughtsTokenCount != 37 || len(u.CandidatesTokensDetails) != 1 ||
		u.CandidatesTokensDetails[0].Modality != "IMAGE" || u.CandidatesTokensDetails[0].TokenCount != 1120 {
		t.Fatalf("usage %+v", u)
	}
	// Vertex's way: TEXT listed beside IMAGE.
	vertex := decode[struct {
		UsageMetadata struct {
			CandidatesTokensDetails []struct {
				Modality   string
				TokenCount int
			}
		}
	}](t, postGemini(t, s, "k", "gemini-3-pro-image-preview:generateContent", strings.Replace(body, "a fox", "a fox "+GeminiTextDetailsTrigger, 1)))
	if d := vertex.UsageMetadata.CandidatesTokensDetails; len(d) != 2 || d[0].Modality != "TEXT" || d[0].TokenCount != 7 || d[1].Modality != "IMAGE" {
		t.Fatalf("text details %+v", d)
	}
	for _, c := range []struct{ model, body, msg string }{
		{"gemini-2.5-flash-image", strings.Replace(body, `"imageConfig"`, `"responseFormat"`, 1), `Unknown name "responseFormat"`},
		{"gemini-2.5-flash-image", body, "unsupported image size 2K"},
		{"gemini-3-pro-image-preview", strings.Replace(body, "16:9", "8:1", 1), "unsupported aspect ratio 8:1"},
		{"gemini-3-pro-image-preview", strings.Replace(body, "a fox", "a fox "+GeminiInvalidTrigger, 1), "invalid argument"},
	} {
		wantGeminiError(t, postGemini(t, s, "k", c.model+":generateContent", c.body), 400, "INVALID_ARGUMENT", c.msg)
	}
	wantGeminiError(t, postGemini(t, s, "bad", "gemini-2.5-flash-image:generateContent", body), 400, "INVALID_ARGUMENT", "API key not valid")
	if n := len(GeminiLargeImage()); n < 4<<20 || n > 5<<20 {
		t.Fatalf("large image %d bytes", n)
	}
}
