// Keeping a Set in step: a new policy, a Store's changes.
package overrides

import (
	"encoding/json"

	"github.com/sluicehq/sluice/policy"
)

// SetPolicy recompiles the Set against p: fromPolicy (FromPolicy's
// overrides of p) replace the previous policy's, and every API override
// held (inactive ones too) is compiled anew, each rule keeping its
// counters. Resolve sees the old overrides until each limit's new ones
// are in place, never an empty limit in between. It returns the problems
// of fromPolicy's overrides (not put in force) and of API overrides that
// p refuses (held inactive: see Set).
func (s *Set) SetPolicy(p *policy.Policy, fromPolicy []Override) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, api := s.held()
	return s.rebuild(p, fromPolicy, api)
}

// Version is the Store version of the last Changes applied (0: none).
func (s *Set) Version() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// Apply applies a Store's changes (Changes): with Full, the API overrides
// held become exactly ch.Records (policy overrides stay); else ch.Deleted
// are removed and ch.Records put. It returns the problems of records the
// policy refuses (held inactive) and of malformed ones (dropped); the
// Set's Version becomes ch.Version.
func (s *Set) Apply(ch Changes) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version = ch.Version
	if ch.Full {
		pol, _ := s.held()
		return s.rebuild(s.p, pol, ch.Records)
	}
	var errs []error
	for _, k := range ch.Deleted {
		var m map[string]string
		if json.Unmarshal([]byte(k.Match), &m) != nil {
			continue
		}
		_ = s.del(k.Name, m, false) // (absent already, or the policy's: nothing to do)
	}
	for i := range ch.Records {
		if err := s.putAPI(&ch.Records[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// putAPI puts an API override, holding it inactive when the policy
// refuses it (dropping it when it is malformed).
func (s *Set) putAPI(o *Override) error {
	if err := o.checkFields(); err != nil {
		return err
	}
	o.Source = SourceAPI
	err := s.put(o)
	if err != nil {
		s.inactive[o.Key()] = inactive{*o, err}
	}
	return err
}

// counted is an override with the counters of its rule.
type counted struct {
	matched uint64
	last    int64
}

// held returns the overrides the Set holds: the policy's, and the API's
// (the inactive ones too).
func (s *Set) held() (pol []Override, api []Override) {
	for _, ix := range *s.idx.Load() {
		ix.mu.RLock()
		for _, g := range ix.groups {
			g.each(func(r *Rule) {
				if r.policy {
					pol = append(pol, r.Override())
				} else {
					api = append(api, r.Override())
				}
			})
		}
		ix.mu.RUnlock()
	}
	for _, in := range s.inactive {
		api = append(api, in.o)
	}
	return pol, api
}

// rebuild replaces the Set's contents with pol and api compiled against
// p, with s.mu held: built aside, then swapped in limit by limit.
func (s *Set) rebuild(p *policy.Policy, pol, api []Override) []error {
	counters := map[*Index]map[string]counted{}
	for _, ix := range *s.idx.Load() {
		ix.mu.RLock()
		m := map[string]counted{}
		for _, g := range ix.groups {
			g.each(func(r *Rule) {
				m[g.sig+"\x00"+r.vals] = counted{matched: r.matched.Load(), last: r.last.Load()}
			})
		}
		ix.mu.RUnlock()
		counters[ix] = m
	}
	ns := NewSet(p)
	var errs []error
	for i := range pol {
		pol[i].Source = SourcePolicy
		if err := ns.put(&pol[i]); err != nil {
			errs = append(errs, err)
		}
	}
	for i := range api {
		if err := ns.putAPI(&api[i]); err != nil {
			errs = append(errs, err)
		}
	}
	old := *s.idx.Load()
	merged := make(map[string]*Index, len(old))
	for name, ix := range old {
		merged[name] = ix
	}
	for name, nx := range *ns.idx.Load() {
		if merged[name] == nil {
			merged[name] = nx
			continue
		}
		ix := merged[name]
		c := counters[ix]
		for _, g := range nx.groups {
			g.ix = ix
			g.each(func(r *Rule) {
				if k, ok := c[g.sig+"\x00"+r.vals]; ok {
					r.matched.Store(k.matched)
					r.last.Store(k.last)
				}
			})
		}
		ix.mu.Lock()
		ix.lim, ix.groups, ix.bySig, ix.params = nx.lim, nx.groups, nx.bySig, nx.params
		ix.n.Store(nx.n.Load())
		ix.gen.Add(1)
		ix.mu.Unlock()
	}
	for name, ix := range merged {
		if (*ns.idx.Load())[name] == nil { // a limit p does not have
			ix.mu.Lock()
			ix.lim, ix.groups, ix.bySig, ix.params = nil, nil, map[string]*group{}, map[Params]*compiled{}
			ix.n.Store(0)
			ix.gen.Add(1)
			ix.mu.Unlock()
		}
	}
	s.idx.Store(&merged)
	s.p, s.exp, s.inactive = p, ns.exp, ns.inactive
	return errs
}
