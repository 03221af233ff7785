// Package configs carries the default configuration, embedded so `tollway run` works from any
// directory with no file at hand.
package configs

import _ "embed"

// Default is configs/tollway.yaml.
//
//go:embed tollway.yaml
var Default []byte
