// This file implements driver choice and health: probes are cached at New and
// refreshed by Health, or by a create failing for lack of isolation, at most
// every reprobeInterval.

package manager

import (
	"context"
	"fmt"
	"strings"
	"time"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// BackendHealth is one driver's probe, as GET /v1/health shows it.
type BackendHealth struct {
	Name      string
	Available bool
	Primary   bool // the one new sandboxes go to
	Level     string
	Sandbox   bool
	Layers    map[string]sandbox.LayerState
	// LayerReasons says why each missing layer is missing on this host.
	LayerReasons map[string]string
	Reasons      []string
	// Templates are the templates it serves (Report.Templates).
	Templates []string
}

// Health probes every configured driver; reports younger than reprobeInterval
// are reused, so a polled health endpoint does not probe on every call.
func (m *Manager) Health(ctx context.Context) []BackendHealth {
	m.mu.Lock()
	probes, fresh := m.reports, time.Since(m.probedAt) < reprobeInterval
	m.mu.Unlock()
	if !fresh {
		probes = m.probeAll(ctx)
	}
	out := make([]BackendHealth, len(m.drivers))
	primary := false
	for i, nd := range m.drivers {
		p := probes[i]
		h := BackendHealth{Name: nd.Name, Available: p.err == nil && p.report.Available,
			Level: p.report.Level, Sandbox: p.report.Sandbox, Layers: p.report.Layers, LayerReasons: p.report.LayerReasons,
			Reasons: p.report.Reasons(), Templates: p.report.Templates}
		if p.err != nil {
			h.Reasons = append(h.Reasons, "probe: "+p.err.Error())
		}
		if h.Available && !primary {
			h.Primary, primary = true, true
		}
		out[i] = h
	}
	for _, u := range m.unopened {
		out = append(out, BackendHealth{Name: u.Name, Reasons: []string{"opening the driver: " + u.Err.Error()}})
	}
	return out
}

// probeAll probes every driver and caches the reports.
func (m *Manager) probeAll(ctx context.Context) []probe {
	probes := make([]probe, len(m.drivers))
	for i, nd := range m.drivers {
		r, err := nd.Driver.Probe(ctx)
		probes[i] = probe{report: r, err: err}
	}
	m.mu.Lock()
	m.reports = probes
	m.probedAt = time.Now()
	m.mu.Unlock()
	return probes
}

// reprobe refreshes the cached reports unless they are fresh.
func (m *Manager) reprobe(ctx context.Context) {
	m.mu.Lock()
	fresh := time.Since(m.probedAt) < reprobeInterval
	m.mu.Unlock()
	if !fresh {
		m.probeAll(context.WithoutCancel(ctx))
	}
}

// pick returns the first available driver by the cached reports. Choosing one
// past the first is a fallback, logged at Warn.
func (m *Manager) pick(ctx context.Context) (NamedDriver, backend.Report, error) {
	m.mu.Lock()
	probes := m.reports
	m.mu.Unlock()
	var why []string
	for _, u := range m.unopened {
		why = append(why, fmt.Sprintf("%s: opening the driver: %v", u.Name, u.Err))
	}
	for i, nd := range m.drivers {
		p := probes[i]
		switch {
		case p.err != nil:
			why = append(why, fmt.Sprintf("%s: probe failed: %v", nd.Name, p.err))
		case !p.report.Available:
			why = append(why, fmt.Sprintf("%s: %s", nd.Name, strings.Join(p.report.Reasons(), "; ")))
		default:
			if i > 0 {
				m.log.WarnContext(ctx, "falling back to a later backend", logkey.Backend, nd.Name,
					"unavailable", strings.Join(why, " | "))
			}
			return nd, p.report, nil
		}
	}
	return NamedDriver{}, backend.Report{}, &RetryError{
		Err:   fmt.Errorf("%w: no backend available (%s)", sandbox.ErrIsolation, strings.Join(why, " | ")),
		After: reprobeInterval,
	}
}
