// This file holds the manager's side of the network tiers: each sandbox's
// egress rules, handed to the daemon's egress path, and changing a running
// sandbox's tier and lists.

package manager

import (
	"context"
	"errors"
	"fmt"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/network"
	"sbx.dev/sbx/internal/network/rules"
	"sbx.dev/sbx/internal/sandbox"
)

// Network is the egress path's record of the sandboxes' rules
// (network.Service).
type Network interface {
	// SetRules sets a sandbox's rules; its open connections are cut when
	// they change.
	SetRules(id sandbox.ID, set *rules.Set)
	// Forget drops a sandbox's rules and events.
	Forget(id sandbox.ID)
	// Events are a sandbox's recent egress decisions, and its totals.
	Events(id sandbox.ID) (events []network.Event, allowed, refused int64)
}

// netRules compiles spec's tier and lists; errors name the field.
func netRules(spec sandbox.Spec) (*rules.Set, error) {
	tier := spec.Network
	if tier == sandbox.NetworkHost {
		tier = sandbox.NetworkNone // the local backend: nothing of sbx's to judge
	}
	set, err := rules.Compile(rules.Mode(tier), spec.NetworkAllow, spec.NetworkBlock)
	var re *rules.Error
	if errors.As(err, &re) {
		return nil, sandbox.Invalid(re.Field, "%s", re.Reason)
	}
	return set, err
}

// networked says whether tier goes beyond loopback through sbx's egress path.
func networked(tier sandbox.Network) bool {
	return tier == sandbox.NetworkAllowlist || tier == sandbox.NetworkFull
}

// useRules hands spec's rules to the egress path, before the sandbox can
// send a packet under them.
func (m *Manager) useRules(spec sandbox.Spec) error {
	if m.network == nil || !networked(spec.Network) {
		return nil
	}
	set, err := netRules(spec)
	if err != nil {
		return err
	}
	m.network.SetRules(spec.ID, set)
	return nil
}

// forgetRules drops id's rules once it is gone.
func (m *Manager) forgetRules(id sandbox.ID) {
	if m.network != nil {
		m.network.Forget(id)
	}
}

// SetNetwork changes a running sandbox's tier and lists, as create would
// admit them. Its open connections are cut; new ones are judged by the new
// rules.
func (m *Manager) SetNetwork(ctx context.Context, id sandbox.ID, tier sandbox.Network, allow, block []string) (sandbox.Sandbox, error) {
	const op = "set network"
	// Existence and owner first: an unknown id and another key's answer
	// alike, whatever the body (SECURITY.md AP-02).
	if err := m.findOwned(ctx, op, id); err != nil {
		return sandbox.Sandbox{}, err
	}
	spec, err := m.policy.AdmitNetwork(tier, allow, block)
	if err == nil {
		_, err = netRules(spec)
	}
	if err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	sb, err := m.store.GetSandbox(ctx, id)
	if err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	if sb.State != sandbox.StateRunning {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: wrongState(sb.State)}
	}
	if sb.Spec.Network == sandbox.NetworkHost {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("%w: backend %s runs on the host's network; it has no tiers", sandbox.ErrInvalid, sb.Backend)}
	}
	spec.ID = id
	d := m.driver(sb.Backend)
	if networked(spec.Network) != networked(sb.Spec.Network) {
		ns, ok := d.(backend.NetworkSetter)
		if !ok {
			return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("%w: backend %s cannot change a running sandbox's network", sandbox.ErrInvalid, sb.Backend)}
		}
		if networked(spec.Network) {
			if err := m.useRules(spec); err != nil {
				return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: err}
			}
		}
		if err := ns.SetNetwork(ctx, id, spec.Network); err != nil {
			return sandbox.Sandbox{}, sandbox.Wrap(op, id, err)
		}
		if !networked(spec.Network) {
			m.forgetRules(id)
		}
	} else if err := m.useRules(spec); err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	out, err := m.store.UpdateSandbox(ctx, id, func(r *sandbox.Sandbox) error {
		r.Spec.Network, r.Spec.NetworkAllow, r.Spec.NetworkBlock = spec.Network, spec.NetworkAllow, spec.NetworkBlock
		return nil
	})
	if err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	m.audit(ctx, id, op, string(spec.Network), "", nil)
	return out, nil
}

// NetworkEvents returns sandbox id's recent egress decisions, oldest first,
// with its totals.
func (m *Manager) NetworkEvents(ctx context.Context, id sandbox.ID) ([]network.Event, int64, int64, error) {
	const op = "network events"
	if err := m.findOwned(ctx, op, id); err != nil {
		return nil, 0, 0, err
	}
	if m.network == nil {
		return nil, 0, 0, nil
	}
	ev, allowed, refused := m.network.Events(id)
	return ev, allowed, refused, nil
}
