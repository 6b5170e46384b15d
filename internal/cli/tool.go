// This file implements `sbx tools` and `sbx tool`: the agent tools (the ones
// the MCP server serves) from a shell.

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
)

func runTools(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("tools", "[--json]")
	jsonOut := fs.Bool("json", false, "print the tools with their schemas as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	if len(pos) > 0 {
		return e.misuse(fs, exitMisuse, "unexpected argument %q", pos[0])
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("tools", *jsonOut, exitError, err)
	}
	defer c.Close()
	ts, err := c.Tools(ctx)
	if err != nil {
		return e.fail("tools", *jsonOut, exitError, err)
	}
	if *jsonOut {
		e.printJSON(ts)
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tCAPABILITY\tWHAT IT DOES")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, t.Capability, t.Title)
	}
	tw.Flush()
	return exitOK
}

func runTool(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("tool", "ID NAME [JSON | KEY=VALUE…]")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	if len(pos) < 2 {
		return e.misuse(fs, exitMisuse, "give a sandbox ID and a tool name (sbx tools lists them)")
	}
	id, name := pos[0], pos[1]
	c, err := e.newClient()
	if err != nil {
		return e.fail("tool", true, exitError, err)
	}
	defer c.Close()
	strs := map[string]bool{}
	if ts, err := c.Tools(ctx); err == nil {
		for _, t := range ts {
			if t.Name == name {
				strs = stringParams(t.InputSchema)
			}
		}
	}
	toolArgs, err := toolArguments(pos[2:], strs)
	if err != nil {
		return e.misuse(fs, exitMisuse, "%v", err)
	}
	var out json.RawMessage
	if err := c.CallTool(ctx, id, name, toolArgs, &out); err != nil {
		return e.fail("tool", true, exitError, err)
	}
	e.printJSON(out)
	return exitOK
}

// stringParams returns the parameters schema declares as strings.
func stringParams(schema json.RawMessage) map[string]bool {
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	json.Unmarshal(schema, &s)
	out := map[string]bool{}
	for k, p := range s.Properties {
		out[k] = p.Type == "string"
	}
	return out
}

// toolArguments reads a tool's arguments: one JSON object, or KEY=VALUE
// pairs. A value is taken as it is for a string parameter (strs), else as
// JSON when it parses (numbers, true, arrays…), else as a string.
func toolArguments(args []string, strs map[string]bool) (map[string]any, error) {
	out := map[string]any{}
	if len(args) == 1 && strings.HasPrefix(strings.TrimSpace(args[0]), "{") {
		if err := json.Unmarshal([]byte(args[0]), &out); err != nil {
			return nil, fmt.Errorf("the arguments are not a JSON object: %v", err)
		}
		return out, nil
	}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("argument %q is not KEY=VALUE (or give one JSON object)", a)
		}
		var j any
		if strs[k] {
			out[k] = v
		} else if err := json.Unmarshal([]byte(v), &j); err == nil {
			out[k] = j
		} else {
			out[k] = v
		}
	}
	return out, nil
}
