package spans

import (
	"github.com/shopspring/decimal"
	"go.opentelemetry.io/otel/attribute"
)

// The attributes of ext_proc's spans: the GenAI semantic conventions' names, and Tollway's own
// under tollway.*. A key is only ever shown by its prefix, never whole.
const (
	OperationKey     = attribute.Key("gen_ai.operation.name")
	SystemKey        = attribute.Key("gen_ai.system")        // the provider's name (the contract)
	ProviderNameKey  = attribute.Key("gen_ai.provider.name") // the same, as later conventions name it
	RequestModelKey  = attribute.Key("gen_ai.request.model")
	ResponseModelKey = attribute.Key("gen_ai.response.model")
	InputTokensKey   = attribute.Key("gen_ai.usage.input_tokens")
	OutputTokensKey  = attribute.Key("gen_ai.usage.output_tokens")
	RouteKey         = attribute.Key("tollway.route")
	KeyPrefixKey     = attribute.Key("tollway.key_prefix")
	CostKey          = attribute.Key("tollway.cost") // exact decimal, in the account's currency
	EstimatedKey     = attribute.Key("tollway.usage.estimated")
	RequestIDKey     = attribute.Key("tollway.request_id")
)

// Operation names (gen_ai.operation.name).
const (
	OpChat       = "chat"
	OpGenerate   = "generate_content" // a media task's create (video, image)
	OpEmbeddings = "embeddings"
)

// Provider is gen_ai.system and gen_ai.provider.name.
func Provider(name string) []attribute.KeyValue {
	return []attribute.KeyValue{SystemKey.String(name), ProviderNameKey.String(name)}
}

// Cost is the bill as its exact decimal text.
func Cost(d decimal.Decimal) attribute.KeyValue { return CostKey.String(d.String()) }
