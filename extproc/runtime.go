package extproc

import (
	"encoding/hex"
	"sort"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Runtime is the immutable, compiled view of configuration the request path reads. A new one is
// built on every change and swapped in atomically; requests in flight keep the one they started with.
type Runtime struct {
	models    map[string]*model
	modelIDs  []string // sorted, for the catalog
	providers map[string]*ir.Provider
	keys      map[[32]byte]*keyInfo
	routes    map[string]*ir.Route    // by id, route:<slug>
	chains    map[string][]ir.Attempt // by cluster name; only providers that can take traffic
	endpoints *metadataMemo           // endpoint metadata text, parsed once
}

type model struct {
	ir.Model
	// supported is nil when the catalog lists no parameters: then every field passes.
	supported map[string]bool
	// byProvider holds the providers whose own list replaces supported.
	byProvider map[string]map[string]bool
}

// supportedBy is the parameter set provider p accepts for m (nil: every field passes).
func (m *model) supportedBy(p string) map[string]bool {
	if s, ok := m.byProvider[p]; ok {
		return s
	}
	return m.supported
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
	MonthlyLimit *decimal.Decimal
	models       map[string]bool // nil: every model
	hash         [32]byte
}

func (k *keyInfo) allows(model string) bool { return k.models == nil || k.models[model] }

// allowsPlan: a route is allowed when the key lists the route itself or every model it may use.
func (k *keyInfo) allowsPlan(p *chatPlan) bool {
	if k.models == nil || (p.route != nil && k.models[p.route.ID]) {
		return true
	}
	for _, m := range p.models {
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
		cm := &model{Model: m}
		if len(m.SupportedParameters) > 0 {
			cm.supported = set(m.SupportedParameters)
		}
		for _, t := range m.Targets {
			if len(t.SupportedParameters) > 0 {
				if cm.byProvider == nil {
					cm.byProvider = map[string]map[string]bool{}
				}
				cm.byProvider[t.Provider] = set(t.SupportedParameters)
			}
		}
		rt.models[m.ID] = cm
		rt.modelIDs = append(rt.modelIDs, m.ID)
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
		ki := &keyInfo{ID: k.ID, Account: k.Account, MonthlyLimit: k.MonthlyLimit, hash: h}
		if len(k.Models) > 0 {
			ki.models = make(map[string]bool, len(k.Models))
			for _, m := range k.Models {
				ki.models[m] = true
			}
		}
		rt.keys[h] = ki
	}
	return rt
}
