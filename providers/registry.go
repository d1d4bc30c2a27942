package providers

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// ErrReferenceConflict is wrapped (together with ErrUnknown) when a provider
// says our reference is already used but the charge it holds under that
// reference does not match the request (amount, currency). The reference is
// a deterministic function of (merchant, key), so this is either another
// system on the same provider account colliding with us or a bug; nothing
// should be released on it, and a person should look (requires_review).
var ErrReferenceConflict = errors.New("provider reference used by a different charge")

// Constructor builds a Provider bound to one tenant's secrets.
type Constructor func(s Secrets) (Provider, error)

// Registry knows the adapters by name (the provider account's "provider"
// column), so the gateway builds a Provider for a tenant without a switch
// over provider names. It is safe for concurrent use; registration normally
// happens once at start.
type Registry struct {
	mu      sync.RWMutex
	entries map[string]entry
}

type entry struct {
	required []string
	build    Constructor
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{entries: map[string]entry{}} }

// Register adds an adapter under name with the secret keys it cannot work
// without (nil for the simulator). Like database/sql.Register it panics on an
// empty name, a nil constructor or a name registered twice: those are wiring
// bugs that must fail at start, not on the first payment.
func (r *Registry) Register(name string, required []string, c Constructor) {
	if name == "" || c == nil {
		panic("providers: Register with empty name or nil constructor")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.entries[name]; dup {
		panic("providers: Register called twice for " + name)
	}
	r.entries[name] = entry{required: slices.Clone(required), build: c}
}

// New builds the named adapter bound to s. Errors wrap ErrUnknownProvider,
// ErrBadSecrets (naming the missing keys, never a value) or whatever the
// adapter's constructor returns.
func (r *Registry) New(name string, s Secrets) (Provider, error) {
	e, err := r.check(name, s)
	if err != nil {
		return nil, err
	}
	p, err := e.build(s)
	if err != nil {
		return nil, fmt.Errorf("providers: %s: %w", name, err)
	}
	return p, nil
}

// Validate runs New's checks without building the adapter, so the admin API
// can reject incomplete secrets when they are stored rather than at the
// first charge.
//
// Unlike New, it also refuses a name the adapter does not take: a typo
// ("secretkey") would be stored, encrypted, and never used, with nobody
// told. The names are not echoed: one may be a pasted key.
func (r *Registry) Validate(name string, s Secrets) error {
	e, err := r.check(name, s)
	if err != nil {
		return err
	}
	for k := range s {
		if !slices.Contains(e.required, k) {
			takes := "none"
			if len(e.required) > 0 {
				takes = strings.Join(e.required, ", ")
			}
			return fmt.Errorf("providers: %s: %w: unknown names; it takes %s", name, ErrBadSecrets, takes)
		}
	}
	return nil
}

// Names lists the registered adapters, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.entries))
	for n := range r.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Has reports whether an adapter of that name is registered.
func (r *Registry) Has(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.entries[name]
	return ok
}

func (r *Registry) check(name string, s Secrets) (entry, error) {
	r.mu.RLock()
	e, ok := r.entries[name]
	r.mu.RUnlock()
	if !ok {
		return entry{}, fmt.Errorf("%w: %q", ErrUnknownProvider, name)
	}
	if missing := MissingSecrets(s, e.required); len(missing) > 0 {
		return entry{}, fmt.Errorf("providers: %s: %w: missing %s", name, ErrBadSecrets, strings.Join(missing, ", "))
	}
	return e, nil
}

// MissingSecrets returns the keys of required that s lacks or holds only
// blanks for, in the order of required. Adapters' constructors use it too, so
// that building one directly checks the same way as the registry.
func MissingSecrets(s Secrets, required []string) []string {
	var missing []string
	for _, k := range required {
		if strings.TrimSpace(s[k]) == "" {
			missing = append(missing, k)
		}
	}
	return missing
}
