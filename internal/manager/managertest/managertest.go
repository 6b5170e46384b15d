// Package managertest builds what the tests of the layers above the manager
// stand on: a real manager over a SQLite store in a temporary directory and
// the fake backend, with the daemon's admin key.
package managertest

import (
	"context"
	"path/filepath"
	"testing"

	"sbx.dev/sbx/internal/backend/fake"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/store"
	"sbx.dev/sbx/internal/testutil"
)

// Env is a running manager and what it stands on.
type Env struct {
	M      *manager.Manager
	Store  *store.Store
	Driver *fake.Driver // named "fake", the manager's one backend
	// AdminToken is the admin key's secret, as admin.key holds it.
	AdminToken string
}

// New starts an Env, recovered and ready; tweak, when given, changes the
// manager's options before it starts (d is the fake driver, to script).
// Everything is closed at the test's end; goroutine leaks fail the test.
func New(t *testing.T, tweak ...func(o *manager.Options, d *fake.Driver)) *Env {
	t.Helper()
	testutil.CheckLeaks(t)
	ctx := t.Context()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	token, _, err := st.CreateKey(ctx, store.AdminKeyName)
	if err != nil {
		t.Fatal(err)
	}
	d := fake.New("fake")
	t.Cleanup(func() { d.Close() })
	o := manager.Options{Store: st, Drivers: []manager.NamedDriver{{Name: "fake", Driver: d}},
		Policy: sandbox.DefaultPolicy(), Log: testutil.Logger(t)}
	for _, f := range tweak {
		f(&o, d)
	}
	m, err := manager.New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	return &Env{M: m, Store: st, Driver: d, AdminToken: token}
}
