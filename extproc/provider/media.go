package provider

// What the media task adapters share: the refusal of fields a family does not take, and field
// readers of a task body.

// onlyFields refuses fields outside known (plus the gateway's own), listing what the family
// takes: a misspelt field must not be silently dropped.
func onlyFields(family string, req Request, known []string) error {
	return OnlyMembers(family, req, known, ItsFields, taskGatewayFields...)
}

// taskGatewayFields are the gateway's own fields of a task request: never sent to a provider.
var taskGatewayFields = []string{"model", "route", "route_mode", "callback_url"}

func stringOf(req Request, key string) (string, bool, error) {
	return ReadString(key, Field(req, key))
}

func intOf(req Request, key string) (int64, bool, error) { return ReadInt(key, Field(req, key)) }

// clip shortens a client's value quoted in a refusal.
func clip(s string) string { return Clip(s, shown) }
