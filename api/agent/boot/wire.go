package boot

import (
	"fmt"

	"sbx.dev/sbx/internal/wire"
)

// Each record starts with its tag, so one read as another fails at once.
const (
	configTag = "sbx.agent-config/1"
	reportTag = "sbx.report/1"
)

// MarshalBinary encodes c for UnmarshalBinary (package wire): the form the
// agent reads its configuration in.
func (c AgentConfig) MarshalBinary() ([]byte, error) {
	w := wire.Record(configTag)
	w.String(c.SandboxID)
	w.Int(int64(c.ListenFD))
	w.String(c.Listen)
	w.String(c.Root)
	w.String(c.Workdir)
	w.String(c.OutputDir)
	w.Strings(c.Env)
	w.Int(c.OutputLimitBytes)
	w.Int(c.SpillLimitBytes)
	w.Int(c.ArchiveMaxBytes)
	w.Int(c.ArchiveMaxEntries)
	w.Int(int64(c.CgroupFD))
	w.Int(int64(c.FreezerFD))
	w.Int(int64(c.OOMFD))
	w.Int(int64(c.PidsDirFD))
	w.Int(c.WorkPids)
	w.String(c.OOMFormat)
	w.Bool(c.Subreaper)
	w.Int(int64(c.ReadyFD))
	w.Bytes(c.Seccomp)
	w.String(c.SeccompID)
	w.Bool(c.Landlock != nil)
	if c.Landlock != nil {
		w.Strings(c.Landlock.Read)
		w.Strings(c.Landlock.Write)
	}
	w.Map(c.Layers)
	w.Int(int64(c.LogFD))
	return w.B, nil
}

// UnmarshalBinary decodes what MarshalBinary made. (The calls in a composite
// literal run in lexical order, the fields' order on the wire.)
func (c *AgentConfig) UnmarshalBinary(b []byte) error {
	r, err := wire.Open(b, configTag)
	if err != nil {
		return fmt.Errorf("agent configuration: %w", err)
	}
	*c = AgentConfig{
		SandboxID: r.String(), ListenFD: int(r.Int()), Listen: r.String(), Root: r.String(),
		Workdir: r.String(), OutputDir: r.String(), Env: r.Strings(),
		OutputLimitBytes: r.Int(), SpillLimitBytes: r.Int(), ArchiveMaxBytes: r.Int(), ArchiveMaxEntries: r.Int(),
		CgroupFD: int(r.Int()), FreezerFD: int(r.Int()), OOMFD: int(r.Int()), PidsDirFD: int(r.Int()),
		WorkPids: r.Int(), OOMFormat: r.String(), Subreaper: r.Bool(), ReadyFD: int(r.Int()),
		Seccomp: r.Bytes(), SeccompID: r.String(),
	}
	if r.Bool() {
		c.Landlock = &LandlockRules{Read: r.Strings(), Write: r.Strings()}
	}
	c.Layers = r.Map()
	c.LogFD = int(r.Int())
	if err := r.Err(); err != nil {
		return fmt.Errorf("agent configuration: %w", err)
	}
	return nil
}

// MarshalBinary encodes r for UnmarshalBinary (package wire): the form of the
// report after ReadyPrefix.
func (r Report) MarshalBinary() ([]byte, error) {
	w := wire.Record(reportTag)
	w.Map(r.Layers)
	w.Int(int64(r.LandlockABI))
	w.String(r.SeccompProfile)
	w.Uint(uint64(len(r.Marks)))
	for _, m := range r.Marks {
		w.String(m.Step)
		w.Int(m.Mono)
	}
	return w.B, nil
}

// UnmarshalBinary decodes what MarshalBinary made.
func (r *Report) UnmarshalBinary(b []byte) error {
	rd, err := wire.Open(b, reportTag)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	*r = Report{Layers: rd.Map(), LandlockABI: int(rd.Int()), SeccompProfile: rd.String()}
	if n := rd.Count(2); n > 0 {
		r.Marks = make([]Mark, n)
		for i := range r.Marks {
			r.Marks[i] = Mark{Step: rd.String(), Mono: rd.Int()}
		}
	}
	if err := rd.Err(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
