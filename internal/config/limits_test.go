package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLimitsAndAudit(t *testing.T) {
	c := defaults(envOf(nil), 0)
	if c.MaxSandboxes != 1000 || c.MaxSandboxesPerKey != 500 || c.CreateRatePerKey != 100 || c.CreateBurstPerKey != 300 ||
		c.ExecRatePerKey != 500 || c.ExecBurstPerKey != 1000 || c.AuditRetention != 7*24*time.Hour || c.AuditMaxRecords != 1_000_000 {
		t.Errorf("defaults = %+v", c)
	}

	file := filepath.Join(t.TempDir(), "sbx.toml")
	os.WriteFile(file, []byte(`
max_sandboxes = 50
max_sandboxes_per_key = 10
create_rate_per_key = 2.5
create_burst_per_key = 5
exec_rate_per_key = 0
audit_retention = "48h"
audit_max_records = 1000
`), 0o600)
	l, err := load([]string{"--config", file}, envOf(map[string]string{"SBX_MAX_SANDBOXES_PER_KEY": "3", "SBX_EXEC_BURST_PER_KEY": "7",
		"SBX_AUDIT_RETENTION": "1h"}), 0)
	if err != nil {
		t.Fatal(err)
	}
	c = l.Config
	if c.MaxSandboxes != 50 || c.MaxSandboxesPerKey != 3 || c.CreateRatePerKey != 2.5 || c.CreateBurstPerKey != 5 ||
		c.ExecRatePerKey != 0 || c.ExecBurstPerKey != 7 || c.AuditRetention != time.Hour || c.AuditMaxRecords != 1000 {
		t.Errorf("file < env: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate = %v", err)
	}
	if got := c.TOML(); !strings.Contains(got, "max_sandboxes_per_key = 3") || !strings.Contains(got, `audit_retention = "1h0m0s"`) {
		t.Errorf("TOML() = %s", got)
	}

	for env, want := range map[string]string{
		"SBX_MAX_SANDBOXES":       "max_sandboxes",
		"SBX_CREATE_RATE_PER_KEY": "create_rate_per_key",
		"SBX_AUDIT_RETENTION":     "audit_retention",
	} {
		if _, err := load(nil, envOf(map[string]string{env: "lots"}), 0); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%s=lots) = %v, want an error naming %s", env, err, want)
		}
	}

	bad := defaults(envOf(nil), 0)
	bad.MaxSandboxesPerKey = -1
	bad.ExecRatePerKey = -2
	bad.AuditRetention = -time.Hour
	err = bad.Validate()
	for _, want := range []string{"max_sandboxes_per_key: -1", "exec_rate_per_key: -2", "audit_retention"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to name %q", err, want)
		}
	}
}
