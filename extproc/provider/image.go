package provider

// The one reader of input images: an image a client sends (a first frame, a reference image, an
// inline part) is checked by its decoded bytes, never by its declared type, before any provider
// sees it.

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // header decoders for image.DecodeConfig: the formats the families take
	_ "image/jpeg"
	_ "image/png"
	"io"
	"net/url"
	"slices"
	"strings"

	_ "golang.org/x/image/bmp"
	_ "golang.org/x/image/tiff"
	_ "golang.org/x/image/webp"
)

// ImageRules are a provider's limits on an input image (docs/media.md states each
// family's).
type ImageRules struct {
	MaxBytes int // decoded size limit
	// Below: the size must be below MaxBytes (MiniMax's "below 20 MB"); otherwise at most
	// MaxBytes.
	Below bool
	// MinShort: the short side must be above this, in pixels (0: no bound).
	MinShort int
	// MinSide and MaxSide: the width and the height each within, inclusive (0: no bound).
	MinSide, MaxSide int
	// MinAspect and MaxAspect: width:height at least the one and at most the other (zero: no
	// bound).
	MinAspect, MaxAspect [2]int
	Formats              []string // image.DecodeConfig's format names
	FormatNames          string   // as a refusal names them
}

// CheckImage checks field's image v: an http or https URL (imageData: the provider fetches it)
// or a base64 data URL, whose decoded bytes must be an image the rules take.
func CheckImage(field, v string, r ImageRules) error {
	data, isURL, err := ImageData(field, v)
	if err != nil || isURL {
		return err
	}
	if base64.StdEncoding.DecodedLen(len(data)) > r.MaxBytes+3 {
		return fmt.Errorf("%w: %s is over %d MB decoded", ErrBadRequest, field, r.MaxBytes>>20)
	}
	im, err := ReadImage(data)
	if err != nil {
		return fmt.Errorf("%w: %s is not valid base64", ErrBadRequest, field)
	}
	return r.check(field, im)
}

func (r ImageRules) check(field string, im ImageInfo) error {
	switch {
	case r.Below && im.Size >= r.MaxBytes:
		return fmt.Errorf("%w: %s is %d bytes decoded; it must be below %d MB", ErrBadRequest, field, im.Size, r.MaxBytes>>20)
	case !r.Below && im.Size > r.MaxBytes:
		return fmt.Errorf("%w: %s is %d bytes decoded; it must be at most %d MB", ErrBadRequest, field, im.Size, r.MaxBytes>>20)
	case !slices.Contains(r.Formats, im.Format):
		return fmt.Errorf("%w: %s is not a %s image (its bytes say %q)", ErrBadRequest, field, r.FormatNames, cmp.Or(im.Format, "unknown"))
	}
	w, h := im.Width, im.Height
	switch {
	case r.MinShort > 0 && min(w, h) <= r.MinShort:
		return fmt.Errorf("%w: %s is %dx%d; its short side must be above %d px", ErrBadRequest, field, w, h, r.MinShort)
	case r.MaxSide > 0 && (min(w, h) < r.MinSide || max(w, h) > r.MaxSide):
		return fmt.Errorf("%w: %s is %dx%d; its width and height must each be %d to %d px", ErrBadRequest, field, w, h, r.MinSide, r.MaxSide)
	}
	// w/h within [a/b, c/d], in integers: w*b >= a*h and w*d <= c*h.
	lo, hi := r.MinAspect, r.MaxAspect
	if hi != [2]int{} && (w*lo[1] < lo[0]*h || w*hi[1] > hi[0]*h) {
		return fmt.Errorf("%w: %s is %dx%d; its aspect ratio must be between %d:%d and %d:%d", ErrBadRequest, field, w, h, lo[0], lo[1], hi[0], hi[1])
	}
	return nil
}

// ImageInfo is what an image's bytes say of it.
type ImageInfo struct {
	Size   int    // decoded bytes
	Format string // image.DecodeConfig's name (png, jpeg, webp, gif, bmp, tiff); "" when no decoder knows it
	// HEIF: an ISO BMFF file with a HEIF brand (HEIC and HEIF), which Go has no decoder of.
	HEIF          bool
	Width, Height int
}

// headBytes is how much of an image is kept decoded while the rest is checked: where headers
// are.
const headBytes = 256 << 10

// ReadImage decodes base64 (standard alphabet, padded; line breaks ignored, as encoding/base64
// does) and reads the image's header. Nothing the size of the image is held unless its header
// lies past the first 256 KiB (a JPEG's large EXIF). An error is invalid base64.
func ReadImage[T string | []byte](b64 T) (ImageInfo, error) {
	var src io.Reader
	switch v := any(b64).(type) {
	case string:
		src = strings.NewReader(v)
	case []byte:
		src = bytes.NewReader(v)
	}
	dec := base64.NewDecoder(base64.StdEncoding, src)
	head := make([]byte, min(headBytes, base64.StdEncoding.DecodedLen(len(b64))))
	n, err := io.ReadFull(dec, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return ImageInfo{}, err
	}
	head = head[:n]
	rest, err := io.Copy(io.Discard, dec)
	if err != nil {
		return ImageInfo{}, err
	}
	im := ImageInfo{Size: n + int(rest)}
	if im.header(head) || im.Size == len(head) {
		return im, nil
	}
	full, err := base64.StdEncoding.DecodeString(string(b64))
	if err != nil {
		return ImageInfo{}, err
	}
	im.header(full)
	return im, nil
}

// header reads the format and size of b, an image's start; it reports whether it found them.
func (im *ImageInfo) header(b []byte) bool {
	if cfg, format, err := image.DecodeConfig(bytes.NewReader(b)); err == nil {
		im.Format, im.Width, im.Height = format, cfg.Width, cfg.Height
		return true
	}
	im.HEIF = len(b) >= 12 && string(b[4:8]) == "ftyp" && slices.Contains(heifBrands, string(b[8:12]))
	return im.HEIF
}

// heifBrands are the ISO BMFF brands of HEIC and HEIF images (the ftyp box's major brand).
var heifBrands = []string{"heic", "heix", "hevc", "hevx", "heim", "heis", "hevm", "hevs", "mif1", "msf1"}

// Base64Size is the decoded size of padded base64 text, read from its length.
func Base64Size[T ~string | ~[]byte](b64 T) int {
	n := len(b64) / 4 * 3
	for i := len(b64) - 1; i >= len(b64)-2 && i >= 0 && b64[i] == '='; i-- {
		n--
	}
	return n
}

// maxImageURL bounds an image URL a client sends.
const maxImageURL = 4096

// ImageData reads field's image, an image URL or a base64 data URL: the data URL's base64, or
// isURL. A URL is the provider's to fetch, not the gateway's, so http and https are taken alike
// and only its form is checked: the scheme, a host, at most 4096 bytes.
func ImageData(field, v string) (data string, isURL bool, err error) {
	if scheme, _, ok := strings.Cut(v, ":"); ok && !strings.EqualFold(scheme, "data") {
		u, err := url.Parse(v)
		switch {
		case err != nil || (!strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https")) || u.Host == "":
			return "", false, fmt.Errorf("%w: %s must be an http or https URL with a host, or a base64 data URL (data:image/png;base64,...), not %q", ErrBadRequest, field, Clip(v, Shown))
		case len(v) > maxImageURL:
			return "", false, fmt.Errorf("%w: %s URL is over %d bytes", ErrBadRequest, field, maxImageURL)
		}
		return "", true, nil
	}
	_, data, ok := ParseDataURL(v)
	if !ok {
		return "", false, fmt.Errorf("%w: %s must be an http or https URL, or a base64 data URL (data:image/png;base64,...), not %q", ErrBadRequest, field, Clip(v, Shown))
	}
	return data, false, nil
}

// ParseDataURL splits a base64 data URL into its media type and data. Only the prefix is
// looked at, so a 20 MB image is not copied.
func ParseDataURL(u string) (mediaType, data string, ok bool) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return "", "", false
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok {
		return "", "", false
	}
	params := strings.Split(meta, ";")
	if params[0] == "" || !slices.Contains(params[1:], "base64") {
		return "", "", false
	}
	return params[0], data, true
}
