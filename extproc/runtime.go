package extproc

import (
	"encoding/hex"
	"slices"
	"sort"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/provider/chat"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Runtime is the immutable, compiled view of configuration the request path reads. A new one is
// built on every change and swapped in atomically; requests in flight keep the one they started with.
type Runtime struct {
	models   map[string]*model
	modelIDs []string // sorted, for the catalog
	// priced finds the chat model that prices usage a provider reports on a model by its own
	// name (pricedAs).
	priced    map[string]*model
	providers map[string]*ir.Provider
	keys      map[[32]byte]*keyInfo
	routes    map[string]*ir.Route    // by id, route:<slug>
	chains    map[string][]ir.Attempt // by cluster name; only providers that can take traffic
	endpoints *metadataMemo           // endpoint metadata text, parsed once
	accessLog bool                    // the access log is on: ext_proc sets its metadata
	// silence is how long a streamed answer may pause before ext_proc ends it (silence.go).
	silence time.Duration
}

type model struct {
	ir.Model
	// params says, per provider name, which request fields an attempt there carries.
	params map[string]paramRule
	// sampling is what the catalog shows: the parameters every provider of the model carries.
	sampling []string
	// demo: a provider of type demo may answer, so the catalog labels the model.
	demo bool
}

// paramRule is the set of request fields one provider carries for one model: its adapter's
// parameters, narrowed by the model's (or the provider entry's) supported_sampling_parameters.
type paramRule struct {
	allowed     map[string]bool
	passUnknown bool            // fields outside allowed pass too (an OpenAI-shaped provider, no list)
	fixed       map[string]bool // allowed only at their default (chat.Parameters.Fixed)
}

// carries reports whether an attempt on provider p keeps field f.
func (m *model) carries(p, f string) bool {
	if alwaysCarried[f] {
		return true
	}
	r, ok := m.params[p]
	return !ok || r.passUnknown || r.allowed[f]
}

// alwaysCarried are the fields every adapter carries: they are the request itself, not
// parameters of it.
var alwaysCarried = map[string]bool{"model": true, "messages": true, "stream": true, "stream_options": true}

// paramsFor works out the rule for provider p serving a model of media family family ("" for a
// chat model), whose own list is list (the provider entry's, else the model's). A list narrows
// what the adapter carries; user, an end-user id rather than a sampling parameter, is carried
// whenever the adapter can, list or not.
func paramsFor(p *ir.Provider, family string, list []string) paramRule {
	params := chat.Parameters{PassUnknown: true} // an unknown type never gets an attempt
	if p != nil {
		if a, err := chat.For(p.Type, family); err == nil {
			params = a.Parameters()
		}
	}
	known := set(params.Known)
	if len(list) == 0 {
		return paramRule{allowed: known, passUnknown: params.PassUnknown, fixed: set(params.Fixed)}
	}
	r := paramRule{allowed: map[string]bool{}, fixed: set(params.Fixed)}
	for _, f := range list {
		if known[f] || params.PassUnknown {
			r.allowed[f] = true
		}
	}
	r.allowed["user"] = known["user"] || params.PassUnknown
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
	for f := range rules[0].allowed {
		if f == "user" || !rules[0].allowed[f] {
			continue
		}
		every := true
		for _, r := range rules {
			every = every && r.allowed[f] && !r.fixed[f]
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
	case m.Family == ir.ChatImageFamily:
		listed := chat.GeminiImageParameters.Listed()
		return slices.DeleteFunc(samplingParameters(rules), func(f string) bool { return !slices.Contains(listed, f) })
	case m.Family != "":
		return nonNil(task.FieldsOf(m))
	}
	return samplingParameters(rules)
}

// upstreamName is the provider's own name for m, "" if p does not serve it.
func (m *model) upstreamName(p string) string {
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

type keyInfo struct {
	ID           string
	Account      string
	Prefix       string // the secret's first characters, as key lists show it (access log)
	MonthlyLimit *decimal.Decimal
	models       map[string]bool // nil: every model
	hash         [32]byte

	// For the key's own view (GET /v1/key): the record as the store had it.
	name      string
	created   time.Time
	modelList []string   // the allow-list in the record's order; nil: every model
	savedUse  *time.Time // the last use the store had saved (the live one is Server.keyUse)
}

func (k *keyInfo) allows(model string) bool { return k.models == nil || k.models[model] }

// allowsPlan: a route is allowed when the key lists the route itself or every model it may use.
func (k *keyInfo) allowsPlan(p *chatPlan) bool { return k.allowsModels(p.route, p.models) }

// allowsModels: a request naming route r (nil: none) that may run models is allowed when the key
// lists the route itself or every one of the models (chat and media requests alike).
func (k *keyInfo) allowsModels(r *ir.Route, models []*model) bool {
	if k.models == nil || (r != nil && k.models[r.ID]) {
		return true
	}
	for _, m := range models {
		if !k.models[m.ID] {
			return false
		}
	}
	return true
}

// Compile builds a Runtime from the IR and the key records. Revoked keys are left out.
func Compile(g *ir.Gateway, keys []store.Key) *Runtime {
	rt := &Runtime{
		endpoints: &metadataMemo{},
		models:    make(map[string]*model, len(g.Models)),
		providers: make(map[string]*ir.Provider, len(g.Providers)),
		keys:      make(map[[32]byte]*keyInfo, len(keys)),
		routes:    make(map[string]*ir.Route, len(g.Routes)),
		chains:    map[string][]ir.Attempt{},
		priced:    map[string]*model{},
		accessLog: !g.AccessLog.Off,
		silence:   silenceAfter(g.AttemptIdle()),
	}
	for i := range g.Routes {
		rt.routes[g.Routes[i].ID] = &g.Routes[i]
	}
	for _, c := range g.Chains() {
		rt.chains[c.Cluster] = c.Targets
	}
	for i := range g.Providers {
		rt.providers[g.Providers[i].Name] = &g.Providers[i]
	}
	for _, m := range g.Models {
		cm := &model{Model: m, params: map[string]paramRule{}}
		var rules []paramRule
		for _, t := range m.Targets {
			if p := rt.providers[t.Provider]; p != nil && p.Type == ir.ProviderTypeDemo {
				cm.demo = true
			}
			list := m.SupportedParameters
			if len(t.SupportedParameters) > 0 {
				list = t.SupportedParameters
			}
			r := paramsFor(rt.providers[t.Provider], m.Family, list)
			cm.params[t.Provider] = r
			rules = append(rules, r)
		}
		cm.sampling = catalogParameters(&m, rules)
		rt.models[m.ID] = cm
		rt.modelIDs = append(rt.modelIDs, m.ID)
		rt.indexPriced(cm)
	}
	sort.Strings(rt.modelIDs)
	for _, k := range keys {
		if k.RevokedAt != nil {
			continue
		}
		var h [32]byte
		if n, err := hex.Decode(h[:], []byte(k.Hash)); err != nil || n != len(h) {
			continue
		}
		ki := &keyInfo{ID: k.ID, Account: k.Account, Prefix: k.Prefix, MonthlyLimit: k.MonthlyLimit, hash: h,
			name: k.Name, created: k.CreatedAt, savedUse: k.LastUsedAt}
		if len(k.Models) > 0 {
			ki.modelList = slices.Clone(k.Models)
			ki.models = make(map[string]bool, len(k.Models))
			for _, m := range k.Models {
				ki.models[m] = true
			}
		}
		rt.keys[h] = ki
	}
	return rt
}

// indexPriced lists a chat model under each provider's name for it, on that provider and on
// its provider type; the first model of the configuration to claim a name keeps it.
func (rt *Runtime) indexPriced(m *model) {
	if m.Family != "" {
		return // media models price tasks, not a chat answer's tokens
	}
	for _, t := range m.Targets {
		keys := []string{"provider\x00" + t.Provider + "\x00" + t.Model}
		if p := rt.providers[t.Provider]; p != nil {
			keys = append(keys, "type\x00"+p.Type+"\x00"+t.Model)
		}
		for _, k := range keys {
			if rt.priced[k] == nil {
				rt.priced[k] = m
			}
		}
	}
}

// pricedAs is the catalog model whose prices bill usage that provider reports on a model by
// the provider's own name for it (upstream): the first chat model of the configuration that
// this provider serves under that name, else the first that a provider of the same type
// serves under it; nil when the catalog has none.
func (rt *Runtime) pricedAs(provider, upstream string) *model {
	if m := rt.priced["provider\x00"+provider+"\x00"+upstream]; m != nil {
		return m
	}
	if p := rt.providers[provider]; p != nil {
		return rt.priced["type\x00"+p.Type+"\x00"+upstream]
	}
	return nil
}

// Provider and Model give the configuration a task needs (tasks.Catalog).
func (rt *Runtime) Provider(name string) *ir.Provider { return rt.providers[name] }

func (rt *Runtime) Model(id string) *ir.Model {
	if m := rt.models[id]; m != nil {
		return &m.Model
	}
	return nil
}
