package backend

import (
	"bytes"
	"fmt"
	"strings"

	"sbx.dev/sbx/api/agent/boot"
)

// ReadyReport reads what an init stage or agent wrote on its ReadyFD before
// closing it: its report of the layers it applied (boot.ReadyPrefix, then
// Report.MarshalBinary), nil for nothing, or an error carrying the reason it
// gave for not starting.
func ReadyReport(msg []byte) (*boot.Report, error) {
	b, ok := bytes.CutPrefix(msg, []byte(boot.ReadyPrefix))
	switch {
	case ok:
		var rep boot.Report
		if err := rep.UnmarshalBinary(b); err != nil {
			return nil, fmt.Errorf("the agent's report of its isolation: %w", err)
		}
		return &rep, nil
	case len(msg) > 0:
		return nil, fmt.Errorf("%s", strings.TrimSpace(string(msg)))
	}
	return nil, nil
}
