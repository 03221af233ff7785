// Package configs carries the embedded configurations, so `tollway run` works from any directory
// with no file at hand.
package configs

import _ "embed"

// Default is configs/tollway.yaml (`tollway run` without --config).
//
//go:embed tollway.yaml
var Default []byte

// Demo is configs/demo.yaml (`tollway run --demo`): the offline demo model, no provider keys.
//
//go:embed demo.yaml
var Demo []byte
