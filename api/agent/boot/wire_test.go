package boot_test

import (
	"testing"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/testutil/wiretest"
)

func TestAgentConfigWire(t *testing.T) {
	wiretest.RoundTrip(t, boot.AgentConfig.MarshalBinary, func(b []byte) (c boot.AgentConfig, err error) {
		err = c.UnmarshalBinary(b)
		return c, err
	})
}

func TestReportWire(t *testing.T) {
	wiretest.RoundTrip(t, boot.Report.MarshalBinary, func(b []byte) (r boot.Report, err error) {
		err = r.UnmarshalBinary(b)
		return r, err
	})
	var c boot.AgentConfig
	b, _ := boot.Report{}.MarshalBinary()
	if err := c.UnmarshalBinary(b); err == nil {
		t.Errorf("a report decoded as an agent configuration")
	}
}
