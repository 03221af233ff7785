package chat

import (
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/internal/fixture"
	"github.com/tollway/tollway/xds/ir"
)

func fuzzGateway() *ir.Gateway   { return fixture.EveryTypeGateway() }
func testGateway() *ir.Gateway   { return fixture.Gateway() }
func testRuntime() *core.Runtime { return fixture.Runtime() }

var (
	decodeObject = fixture.DecodeObject
	jsonString   = fixture.JSONString
)
