// This file finds the workspace files a command created or changed: one walk
// of the workspace after the command, in the agent, by file times.

package tools

import (
	"context"
	"time"

	"sbx.dev/sbx/internal/agentclient"
)

// timeMargin is subtracted from a command's start before comparing file
// times: the kernel stamps files from a clock that may lag the agent's by a
// tick, so a file written at once could look older than the command.
const timeMargin = 20 * time.Millisecond

// changed returns the regular files under the workspace modified since
// (sorted, at most maxReportedFiles), and whether the list is incomplete.
func (c *Call) changed(ctx context.Context, since time.Time) (files []string, more bool, err error) {
	err = c.M().Call(ctx, c.Tool, c.Sandbox, func(cl *agentclient.Client) error {
		files, more, err = cl.Changed(ctx, Workspace, since.Add(-timeMargin), maxReportedFiles)
		return err
	})
	return files, more, err
}
