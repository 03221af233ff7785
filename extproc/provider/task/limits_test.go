package task

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/png"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/provider/internal/providertest"
	"github.com/tollway/tollway/xds/ir"
)

// paddedPNG is a w x h PNG padded to exactly size bytes: decoders read its header only.
func paddedPNG(t *testing.T, w, h, size int) string {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	raw := append(b.Bytes(), make([]byte, size-b.Len())...)
	return base64.StdEncoding.EncodeToString(raw)
}

// TestImageSizeLimitsAtTheByte: each family's input image limit at the exact byte, as
// docs/media.md states it: V1's first frame "under 20 MB" (20 MB is refused: the spec's
// "below 20 MB"), I2 "at most 10 MB", I2b "at most 20 MB", I3 "at most 20 MiB each" (the limit
// itself is taken). One image checker serves them all, so one comparison for every family
// would break one of these.
func TestImageSizeLimitsAtTheByte(t *testing.T) {
	v1 := &ir.Model{ID: "hailuo-02", Family: "V1"}
	i3 := &ir.Model{ID: "gemini-image", Family: "I3", Variant: "pro"}
	for _, tc := range []struct {
		name  string
		m     *ir.Model
		a     Adapter
		size  int
		ok    bool
		body  func(b64 string) string
		tells string
	}{
		{"V1 under 20 MB", v1, minimax{}, 20<<20 - 1, true, v1Frame, ""},
		{"V1 at 20 MB", v1, minimax{}, 20 << 20, false, v1Frame, "it must be below 20 MB"},
		{"I2 at 10 MB", qwenStd, dashscopeImage{family: "I2"}, 10 << 20, true, dsImage, ""},
		{"I2 over 10 MB", qwenStd, dashscopeImage{family: "I2"}, 10<<20 + 1, false, dsImage, "it must be at most 10 MB"},
		{"I2b at 20 MB", wanStd, dashscopeImage{family: "I2b"}, 20 << 20, true, dsImage, ""},
		{"I2b over 20 MB", wanStd, dashscopeImage{family: "I2b"}, 20<<20 + 1, false, dsImage, "it must be at most 20 MB"},
		{"I3 at 20 MiB", i3, geminiImage{}, 20 << 20, true, i3Inline, ""},
		{"I3 over 20 MiB", i3, geminiImage{}, 20<<20 + 1, false, i3Inline, "at most 20 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.a.Validate(tc.m, taskReq(t, tc.body(paddedPNG(t, 512, 512, tc.size))))
			switch {
			case tc.ok && err != nil:
				t.Fatalf("%d bytes refused: %v", tc.size, err)
			case !tc.ok && (err == nil || !strings.Contains(err.Error(), tc.tells)):
				t.Fatalf("%d bytes: %v, want a refusal saying %q", tc.size, err, tc.tells)
			}
		})
	}
}

func v1Frame(b64 string) string {
	return `{"prompt":"a fox","first_frame_image":"data:image/png;base64,` + b64 + `"}`
}

func dsImage(b64 string) string {
	return dsBody(`{"text":"a fox"},{"image":"data:image/png;base64,`+b64+`"}`, "")
}

func i3Inline(b64 string) string {
	return `{"contents":[{"parts":[{"text":"a fox"},{"inline_data":{"mime_type":"image/png","data":"` + b64 + `"}}]}]}`
}

// TestClippedValuesStayUTF8: a client's value quoted in a refusal is cut at a character
// boundary (docs/api.md#errors: messages are JSON in UTF-8), never inside a character.
func TestClippedValuesStayUTF8(t *testing.T) {
	long := "a" + strings.Repeat("é", 100)       // two bytes a character: an even cut splits one
	for _, v := range []string{long, long[1:]} { // the value's quote counts: either parity
		_, err := minimax{}.Validate(&ir.Model{ID: "v", Family: "V1"}, taskReq(t, `{"prompt":"a fox","duration":"`+v+`"}`))
		providertest.ClipsWhole(t, err, v)
	}
}
