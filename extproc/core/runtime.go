package core

import (
	"encoding/hex"
	"slices"
	"sort"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/provider/chat"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/extproc/ratelimit"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Runtime is the immutable, compiled view of configuration the request path reads. A new one is
// built on every change and swapped in atomically; requests in flight keep the one they started with.
type Runtime struct {
	Models   map[string]*Model
	ModelIDs []string // sorted, for the catalog
	// priced finds the chat model that prices usage a provider reports on a model by its own
	// name (pricedAs).
	priced    map[string]*Model
	Providers map[string]*ir.Provider
	Keys      map[[32]byte]*KeyInfo
	Routes    map[string]*ir.Route    // by id, route:<slug>
	Chains    map[string][]ir.Attempt // by cluster name; only providers that can take traffic
	Endpoints *MetadataMemo           // endpoint metadata text, parsed once
	AccessLog bool                    // the access log is on: ext_proc sets its metadata
	// Silence is how long a streamed answer may pause before ext_proc ends it (Silence.go).
	Silence time.Duration
}

type Model struct {
	ir.Model
	// Params says, per provider name, which request fields an attempt there carries.
	Params map[string]paramRule
	// Sampling is what the catalog shows: the parameters every provider of the model carries.
	Sampling []string
	// Demo: a provider of type Demo may answer, so the catalog labels the model.
	Demo bool
	// Adapters are the chat adapters of the model's providers, by provider name, chosen once
	// here (chat.For) so that an attempt goes straight to its provider's; a provider whose type
	// has none is not listed.
	Adapters map[string]chat.Adapter
}

// paramRule is the set of request fields one provider carries for one model: its adapter's
// parameters, narrowed by the model's (or the provider entry's) supported_sampling_parameters.
type paramRule struct {
	Allowed     map[string]bool
	passUnknown bool            // fields outside allowed pass too (an OpenAI-shaped provider, no list)
	fixed       map[string]bool // allowed only at their default (chat.Parameters.Fixed)
}

// Carries reports whether an attempt on provider p keeps field f.
func (m *Model) Carries(p, f string) bool {
	if alwaysCarried[f] {
		return true
	}
	r, ok := m.Params[p]
	return !ok || r.passUnknown || r.Allowed[f]
}

// alwaysCarried are the fields every adapter carries: they are the request itself, not
// parameters of it.
var alwaysCarried = map[string]bool{"model": true, "messages": true, "stream": true, "stream_options": true}

// adapterFor is the chat adapter of provider p for a model of media family family ("" for a
// chat model); nil when p is unknown or its type has none.
func adapterFor(p *ir.Provider, family string) chat.Adapter {
	if p == nil {
		return nil
	}
	a, err := chat.For(p.Type, family)
	if err != nil {
		return nil
	}
	return a
}

// paramsFor works out the rule for a provider whose chat adapter is a (nil: none), for a model
// whose own list is list (the provider entry's, else the model's). A list narrows what the
// adapter carries; user, an end-user id rather than a sampling parameter, is carried whenever
// the adapter can, list or not.
func paramsFor(a chat.Adapter, list []string) paramRule {
	params := chat.Parameters{PassUnknown: true} // an unknown type never gets an attempt
	if a != nil {
		params = a.Parameters()
	}
	known := set(params.Known)
	if len(list) == 0 {
		return paramRule{Allowed: known, passUnknown: params.PassUnknown, fixed: set(params.Fixed)}
	}
	r := paramRule{Allowed: map[string]bool{}, fixed: set(params.Fixed)}
	for _, f := range list {
		if known[f] || params.PassUnknown {
			r.Allowed[f] = true
		}
	}
	r.Allowed["user"] = known["user"] || params.PassUnknown
	return r
}

// samplingParameters is the catalog's supported_sampling_parameters: the fields every provider
// of the model carries with any valid value (so every attempt honours them), user aside,
// sorted.
func samplingParameters(rules []paramRule) []string {
	out := []string{}
	if len(rules) == 0 {
		return out
	}
	for f := range rules[0].Allowed {
		if f == "user" || !rules[0].Allowed[f] {
			continue
		}
		every := true
		for _, r := range rules {
			every = every && r.Allowed[f] && !r.fixed[f]
		}
		if every {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// catalogParameters are what the catalog lists for m (supported_sampling_parameters), from the
// declarations its requests are checked with: a chat model's are what its providers carry
// (samplingParameters); an image model answering chats (I3) lists the chat fields it honours,
// not tools and the like it refuses by name; another media model its family's fields.
func catalogParameters(m *ir.Model, rules []paramRule) []string {
	switch {
	case m.Kind() == ir.KindEmbeddings:
		return slices.Clone(EmbeddingsParameters)
	case m.Family == ir.ChatImageFamily:
		listed := chat.GeminiImageParameters.Listed()
		return slices.DeleteFunc(samplingParameters(rules), func(f string) bool { return !slices.Contains(listed, f) })
	case m.Family != "":
		return NonNil(task.FieldsOf(m))
	}
	return samplingParameters(rules)
}

// UpstreamName is the provider's own name for m, "" if p does not serve it.
func (m *Model) UpstreamName(p string) string {
	for _, t := range m.Targets {
		if t.Provider == p {
			return t.Model
		}
	}
	return ""
}

func set(list []string) map[string]bool {
	out := make(map[string]bool, len(list))
	for _, v := range list {
		out[v] = true
	}
	return out
}

type KeyInfo struct {
	ID           string
	Account      string
	Prefix       string // the secret's first characters, as key lists show it (access log)
	MonthlyLimit *decimal.Decimal
	Models       map[string]bool // nil: every model
	// Rates are the key's requests and tokens per minute: its own, else the configuration's
	// default (ir.Gateway.KeyRateLimits); zero: none.
	Rates ratelimit.Limits
	hash  [32]byte

	// For the key's own view (GET /v1/key): the record as the store had it.
	Name      string
	Created   time.Time
	ModelList []string   // the allow-list in the record's order; nil: every model
	SavedUse  *time.Time // the last use the store had saved (the live one is Server.keyUse)
}

func (k *KeyInfo) Allows(model string) bool { return k.Models == nil || k.Models[model] }

// AllowsModels: a request naming route r (nil: none) that may run models is allowed when the key
// lists the route itself or every one of the models (chat and media requests alike).
func (k *KeyInfo) AllowsModels(r *ir.Route, models []*Model) bool {
	if k.Models == nil || (r != nil && k.Models[r.ID]) {
		return true
	}
	for _, m := range models {
		if !k.Models[m.ID] {
			return false
		}
	}
	return true
}

// Compile builds a Runtime from the IR and the key records. Revoked keys are left out.
func Compile(g *ir.Gateway, keys []store.Key) *Runtime {
	rt := &Runtime{
		Endpoints: &MetadataMemo{},
		Models:    make(map[string]*Model, len(g.Models)),
		Providers: make(map[string]*ir.Provider, len(g.Providers)),
		Keys:      make(map[[32]byte]*KeyInfo, len(keys)),
		Routes:    make(map[string]*ir.Route, len(g.Routes)),
		Chains:    map[string][]ir.Attempt{},
		priced:    map[string]*Model{},
		AccessLog: !g.AccessLog.Off,
		Silence:   silenceAfter(g.AttemptIdle()),
	}
	for i := range g.Routes {
		rt.Routes[g.Routes[i].ID] = &g.Routes[i]
	}
	for _, c := range g.Chains() {
		rt.Chains[c.Cluster] = c.Targets
	}
	for i := range g.Providers {
		rt.Providers[g.Providers[i].Name] = &g.Providers[i]
	}
	for _, m := range g.Models {
		cm := &Model{Model: m, Params: map[string]paramRule{}, Adapters: map[string]chat.Adapter{}}
		var rules []paramRule
		for _, t := range m.Targets {
			if p := rt.Providers[t.Provider]; p != nil && p.Type == ir.ProviderTypeDemo {
				cm.Demo = true
			}
			list := m.SupportedParameters
			if len(t.SupportedParameters) > 0 {
				list = t.SupportedParameters
			}
			a := adapterFor(rt.Providers[t.Provider], m.Family)
			if a != nil {
				cm.Adapters[t.Provider] = a
			}
			r := paramsFor(a, list)
			cm.Params[t.Provider] = r
			rules = append(rules, r)
		}
		cm.Sampling = catalogParameters(&m, rules)
		rt.Models[m.ID] = cm
		rt.ModelIDs = append(rt.ModelIDs, m.ID)
		rt.indexPriced(cm)
	}
	sort.Strings(rt.ModelIDs)
	for _, k := range keys {
		if k.RevokedAt != nil {
			continue
		}
		var h [32]byte
		if n, err := hex.Decode(h[:], []byte(k.Hash)); err != nil || n != len(h) {
			continue
		}
		ki := &KeyInfo{ID: k.ID, Account: k.Account, Prefix: k.Prefix, MonthlyLimit: k.MonthlyLimit, hash: h,
			Name: k.Name, Created: k.CreatedAt, SavedUse: k.LastUsedAt, Rates: keyRates(k, g.KeyRateLimits)}
		if len(k.Models) > 0 {
			ki.ModelList = slices.Clone(k.Models)
			ki.Models = make(map[string]bool, len(k.Models))
			for _, m := range k.Models {
				ki.Models[m] = true
			}
		}
		rt.Keys[h] = ki
	}
	return rt
}

// keyRates are k's rates: each one it sets, else def's.
func keyRates(k store.Key, def ir.RateLimits) ratelimit.Limits {
	var own ir.RateLimits
	if k.RateLimits != nil {
		own = ir.RateLimitsOf(k.RateLimits.RequestsPerMinute, k.RateLimits.TokensPerMinute)
	}
	r := own.Or(def)
	return ratelimit.Limits{Requests: r.RequestsPerMinute, Tokens: r.TokensPerMinute}
}

// indexPriced lists a chat model under each provider's name for it, on that provider and on
// its provider type; the first model of the configuration to claim a name keeps it.
func (rt *Runtime) indexPriced(m *Model) {
	if m.Family != "" {
		return // media models price tasks, not a chat answer's tokens
	}
	for _, t := range m.Targets {
		keys := []string{"provider\x00" + t.Provider + "\x00" + t.Model}
		if p := rt.Providers[t.Provider]; p != nil {
			keys = append(keys, "type\x00"+p.Type+"\x00"+t.Model)
		}
		for _, k := range keys {
			if rt.priced[k] == nil {
				rt.priced[k] = m
			}
		}
	}
}

// PricedAs is the catalog model whose prices bill usage that provider reports on a model by
// the provider's own name for it (upstream): the first chat model of the configuration that
// this provider serves under that name, else the first that a provider of the same type
// serves under it; nil when the catalog has none.
func (rt *Runtime) PricedAs(provider, upstream string) *Model {
	if m := rt.priced["provider\x00"+provider+"\x00"+upstream]; m != nil {
		return m
	}
	if p := rt.Providers[provider]; p != nil {
		return rt.priced["type\x00"+p.Type+"\x00"+upstream]
	}
	return nil
}

// Provider and Model give the configuration a task needs (tasks.Catalog).
func (rt *Runtime) Provider(name string) *ir.Provider { return rt.Providers[name] }

func (rt *Runtime) Model(id string) *ir.Model {
	if m := rt.Models[id]; m != nil {
		return &m.Model
	}
	return nil
}

func NonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// silenceAfter is how long a streamed answer may pause before ext_proc ends it: the attempt
// timeout, less a tenth (at most 1 s) so that ext_proc's end comes before Envoy's reset.
func silenceAfter(attempt time.Duration) time.Duration {
	return attempt - min(attempt/10, time.Second)
}

// EmbeddingsParameters are the embeddings request's fields beyond model and input, as the
// catalog lists them for an embeddings model.
var EmbeddingsParameters = []string{"dimensions", "encoding_format", "user"}

// GatewayFields are Tollway's own and never reach a provider.
var GatewayFields = []string{"route", "route_mode"}

// Unsupported lists, sorted, the fields among fields that an attempt on provider does not carry
// for m (gateway fields aside: they are dropped for every provider, not for lack of support).
func (m *Model) Unsupported(provider string, fields []string) []string {
	var out []string
	for _, f := range fields {
		if !m.Carries(provider, f) && !slices.Contains(GatewayFields, f) {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// CapCarried reports whether every provider of m carries an output cap field, so the client's
// cap bounds every attempt (capOutput) and may size the hold.
func (m *Model) CapCarried() bool {
	for _, t := range m.Targets {
		if !m.Carries(t.Provider, "max_tokens") && !m.Carries(t.Provider, "max_completion_tokens") {
			return false
		}
	}
	return true
}

// Narrowed is k limited to models as well (an endpoint's models: list).
func (k *KeyInfo) Narrowed(models []string) *KeyInfo {
	n := *k
	n.Models = map[string]bool{}
	for _, m := range models {
		if k.Models == nil || k.Models[m] {
			n.Models[m] = true
		}
	}
	return &n
}
