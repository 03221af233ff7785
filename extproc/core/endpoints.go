package core

import (
	"strings"

	"github.com/tollway/tollway/xds/ir"
)

const (
	ChatPath       = ir.ChatPath
	EmbeddingsPath = ir.EmbeddingsPath
	ModelsPath     = "/v1/models"
)

const KeyPath = "/v1/key"

// PayPrefix starts every paid path: {pay_url}/x402/{slug}.
const PayPrefix = "/x402/"

// MediaPaths are the task endpoints, by the kind of task they create.
var MediaPaths = map[string]string{ir.KindVideo: "/v1/videos", ir.KindImage: "/v1/images"}

// MediaKind is the kind of task path's endpoint serves ("" when it is not a media path).
func MediaKind(path string) string {
	for kind, p := range MediaPaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return kind
		}
	}
	return ""
}

func Article(kind string) string {
	if kind == ir.KindImage {
		return "n"
	}
	return ""
}

// EndpointOf is the endpoint that creates answers of a model kind.
func EndpointOf(kind string) string {
	switch kind {
	case ir.KindChat:
		return ChatPath
	case ir.KindEmbeddings:
		return EmbeddingsPath
	}
	return MediaPaths[kind]
}
