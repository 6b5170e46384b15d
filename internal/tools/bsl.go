// This file implements bsl_check (seed 000): BSL Language Server's analyzer
// run in the sandbox on 1C:Enterprise / OneScript code, its JSON report read
// back as structured diagnostics.

package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"sort"
	"strings"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// bslServer is the analyzer's program, looked up on the sandbox's PATH.
const bslServer = "bsl-language-server"

// bslReport is the file the analyzer's json reporter writes in its output
// directory.
const bslReport = "bsl-json.json"

// Bounds of bsl_check.
const (
	bslReportMax      = 16 << 20
	bslDiagnosticsMax = 5000
)

// bslSeverities are the LSP severities in order, as the report spells them
// (the numbers 1–4 stand for them in LSP's own encoding).
var bslSeverities = []string{"Error", "Warning", "Information", "Hint"}

type bslCheckIn struct {
	Path          string `json:"path"`
	Configuration string `json:"configuration"`
	MinSeverity   string `json:"min_severity"`
	Timeout       *int   `json:"timeout"`
}

type bslDiagnostic struct {
	File      string `json:"file"`
	Line      int    `json:"line"`
	Column    int    `json:"column"`
	EndLine   int    `json:"end_line"`
	EndColumn int    `json:"end_column"`
	Severity  string `json:"severity"`
	Code      string `json:"code"`
	Message   string `json:"message"`
}

type bslCheckOut struct {
	Path          string          `json:"path"`
	Diagnostics   []bslDiagnostic `json:"diagnostics"`
	Counts        map[string]int  `json:"counts"`
	FilesAnalyzed int             `json:"files_analyzed"`
	Truncated     bool            `json:"truncated"`
}

func (o bslCheckOut) Text() string {
	var b strings.Builder
	for _, d := range o.Diagnostics {
		fmt.Fprintf(&b, "%s:%d:%d: %s %s: %s\n", d.File, d.Line, d.Column, strings.ToLower(d.Severity), d.Code, d.Message)
	}
	if o.Truncated {
		fmt.Fprintf(&b, "[bsl_check: the first %d diagnostics are listed]\n", len(o.Diagnostics))
	}
	fmt.Fprintf(&b, "%d files analyzed: %d errors, %d warnings, %d information, %d hints\n", o.FilesAnalyzed,
		o.Counts["Error"], o.Counts["Warning"], o.Counts["Information"], o.Counts["Hint"])
	return b.String()
}

func bslTools() []*Tool {
	return []*Tool{define(Tool{
		Name:  "bsl_check",
		Title: "Check 1C (BSL) code with BSL Language Server",
		Description: "Run BSL Language Server's analyzer (bsl-language-server --analyze, in the sandbox) on 1C:Enterprise " +
			"or OneScript code and return its diagnostics. path is a .bsl or .os file, or a directory (e.g. a " +
			"configuration exported to files, or a project's src) whose .bsl and .os files are all analyzed; " +
			"relative paths start at /workspace. configuration is a .bsl-language-server.json file to use (" +
			"diagnostics to enable or disable, their parameters, language). min_severity drops diagnostics below " +
			"it (Error > Warning > Information > Hint; default: keep all). timeout is in seconds, 1–3600, default " +
			"600. Returns diagnostics — file (absolute path), line and column where it starts (1-based), " +
			"end_line and end_column, severity (Error, Warning, Information, Hint), code (the diagnostic's key, " +
			"e.g. LineLength) and message — sorted by file and line, at most 5000; counts per severity (of all, " +
			"even past 5000); files_analyzed. Needs a template with bsl-language-server on PATH (and Java); " +
			"without it the call fails saying so.",
		Capability: CapLint,
		ReadOnly:   true,
		Input: json.RawMessage(`{
  "type": "object",
  "required": ["path"],
  "properties": {
    "path": {"type": "string", "description": "A .bsl/.os file or a directory of them, e.g. \"src/CommonModules/Utils/Ext/Module.bsl\" or \"src\"."},
    "configuration": {"type": "string", "description": "Path of a .bsl-language-server.json configuration file in the sandbox."},
    "min_severity": {"type": "string", "enum": ["Error", "Warning", "Information", "Hint"], "description": "Keep diagnostics of this severity and above."},
    "timeout": {"type": "integer", "minimum": 1, "maximum": 3600, "default": 600, "description": "Seconds before the analysis is stopped (1–3600, default 600)."}
  },
  "additionalProperties": false
}`),
		Output: json.RawMessage(`{
  "type": "object",
  "required": ["path", "diagnostics", "counts", "files_analyzed", "truncated"],
  "properties": {
    "path": {"type": "string", "description": "The file or directory analyzed (absolute)."},
    "diagnostics": {"type": "array", "items": {
      "type": "object",
      "required": ["file", "line", "column", "end_line", "end_column", "severity", "code", "message"],
      "properties": {
        "file": {"type": "string"},
        "line": {"type": "integer", "description": "1-based."},
        "column": {"type": "integer", "description": "1-based."},
        "end_line": {"type": "integer"},
        "end_column": {"type": "integer"},
        "severity": {"type": "string", "enum": ["Error", "Warning", "Information", "Hint"]},
        "code": {"type": "string"},
        "message": {"type": "string"}
      }
    }},
    "counts": {"type": "object", "additionalProperties": {"type": "integer"}, "description": "Diagnostics per severity: Error, Warning, Information, Hint."},
    "files_analyzed": {"type": "integer"},
    "truncated": {"type": "boolean", "description": "More diagnostics than the 5000 listed."}
  }
}`),
	}, runBSLCheck)}
}

func runBSLCheck(ctx context.Context, c *Call, in bslCheckIn) (bslCheckOut, error) {
	target, err := sandboxPath("path", in.Path)
	if err != nil {
		return bslCheckOut{}, err
	}
	minRank := len(bslSeverities)
	if in.MinSeverity != "" {
		if minRank = severityRank(in.MinSeverity); minRank == 0 {
			return bslCheckOut{}, sandbox.Invalid("min_severity", "%q is not one of %s", truncate(in.MinSeverity, 40), strings.Join(bslSeverities, ", "))
		}
	}
	timeout, err := seconds("timeout", in.Timeout, 600, 1, 3600)
	if err != nil {
		return bslCheckOut{}, err
	}
	fi, err := c.M().Stat(ctx, c.Sandbox, target)
	if err != nil {
		return bslCheckOut{}, c.own(err)
	}
	target = fi.Path
	var config string
	if in.Configuration != "" {
		if config, err = sandboxPath("configuration", in.Configuration); err != nil {
			return bslCheckOut{}, err
		}
		if _, err := c.M().Stat(ctx, c.Sandbox, config); err != nil {
			return bslCheckOut{}, c.own(err)
		}
	}
	// The analyzer takes a directory: a file is analyzed as the only one of
	// a temporary directory, and reported under its own path.
	tmp := fmt.Sprintf("/tmp/sbx-bsl-%d", time.Now().UnixNano())
	defer c.M().Remove(context.WithoutCancel(ctx), c.Sandbox, tmp)
	srcDir, outDir := target, tmp+"/out"
	copied := map[string]string{} // the copy's path: the original's
	switch fi.Type {
	case "dir":
	case "file":
		ext := strings.ToLower(path.Ext(target))
		if ext != ".bsl" && ext != ".os" {
			return bslCheckOut{}, sandbox.Invalid("path", "'%s' is not a .bsl or .os file (nor a directory)", target)
		}
		srcDir = tmp + "/src"
		if _, err := c.M().MakeDir(ctx, c.Sandbox, srcDir); err != nil {
			return bslCheckOut{}, c.own(err)
		}
		cp := srcDir + "/" + path.Base(target)
		res, err := c.run(ctx, command{argv: []string{"cp", "--", target, cp}, timeout: time.Minute})
		if err != nil {
			return bslCheckOut{}, err
		}
		if res.ExitCode != 0 {
			return bslCheckOut{}, fmt.Errorf("%w: copying %s for the analyzer failed: %s", sandbox.ErrWrongState, target, outputTail(res, 1000))
		}
		copied[cp] = target
	default:
		return bslCheckOut{}, sandbox.Invalid("path", "'%s' is a %s, not a .bsl or .os file or a directory", target, fi.Type)
	}
	if _, err := c.M().MakeDir(ctx, c.Sandbox, outDir); err != nil {
		return bslCheckOut{}, c.own(err)
	}
	argv := []string{bslServer, "--analyze", "--srcDir", srcDir, "--reporter", "json", "--outputDir", outDir}
	if config != "" {
		argv = append(argv, "--configuration", config)
	}
	// In srcDir, so that the report's paths (which the analyzer may write
	// relative to it, as URIs of its working directory) resolve there.
	res, err := c.run(ctx, command{argv: argv, cwd: srcDir, timeout: timeout})
	if errors.Is(err, errNotInstalled) {
		return bslCheckOut{}, notInstalled(bslServer + " is not installed in this sandbox's template; " +
			"use a template that has it on PATH (BSL Language Server, with a Java runtime, from github.com/1c-syntax/bsl-language-server)")
	}
	if err != nil {
		return bslCheckOut{}, err
	}
	if res.Reason == sandbox.ReasonTimeout {
		return bslCheckOut{}, fmt.Errorf("%w: %s ran past %s on %s and was stopped; raise timeout or check a smaller directory", sandbox.ErrTimeout, bslServer, timeout, target)
	}
	r, err := c.M().ReadFile(ctx, c.Sandbox, outDir+"/"+bslReport, 0, bslReportMax)
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return bslCheckOut{}, fmt.Errorf("%w: %s wrote no report (exit code %d): %s", sandbox.ErrWrongState, bslServer, res.ExitCode, outputTail(res, 3000))
		}
		return bslCheckOut{}, c.own(err)
	}
	if r.Size > bslReportMax {
		return bslCheckOut{}, fmt.Errorf("%w: %s's report is %d bytes, more than %d; check a smaller directory", sandbox.ErrTooLarge, bslServer, r.Size, bslReportMax)
	}
	out, err := parseBSLReport(r.Content, srcDir, copied, minRank)
	if err != nil {
		return bslCheckOut{}, err
	}
	out.Path = target
	return out, nil
}

// severityRank is s's place in bslSeverities from 1, or 0 when it is none.
func severityRank(s string) int {
	for i, v := range bslSeverities {
		if strings.EqualFold(s, v) {
			return i + 1
		}
	}
	return 0
}

// bslSeverity reads a diagnostic's severity: a name, or LSP's number.
func bslSeverity(raw json.RawMessage) string {
	var n int
	if json.Unmarshal(raw, &n) == nil && n >= 1 && n <= len(bslSeverities) {
		return bslSeverities[n-1]
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if r := severityRank(s); r > 0 {
			return bslSeverities[r-1]
		}
	}
	return "Error" // LSP: a client may take a missing severity as an error
}

// bslCode reads a diagnostic's code: a string, a number, or lsp4j's Either
// ({"left": …} or {"right": …}).
func bslCode(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	var e struct {
		Left  json.RawMessage `json:"left"`
		Right json.RawMessage `json:"right"`
	}
	if json.Unmarshal(raw, &e) == nil {
		if e.Left != nil {
			return bslCode(e.Left)
		}
		if e.Right != nil {
			return bslCode(e.Right)
		}
	}
	return strings.Trim(string(raw), `"`)
}

// bslFile turns a report's path into the file's path in the sandbox: the
// report gives a file URI (file:///…, percent-encoded), or a path that may
// be relative to srcDir; a temporary copy maps back to its original.
func bslFile(p, srcDir string, copied map[string]string) string {
	if strings.HasPrefix(p, "file:") {
		if u, err := url.Parse(p); err == nil && u.Path != "" {
			p = u.Path
		} else {
			p = strings.TrimPrefix(strings.TrimPrefix(p, "file:"), "//")
		}
	}
	if !strings.HasPrefix(p, "/") {
		p = path.Join(srcDir, p)
	}
	p = path.Clean(p)
	if orig, ok := copied[p]; ok {
		return orig
	}
	return p
}

// parseBSLReport reads the json reporter's report (bsl-json.json): {"date",
// "sourceDir", "fileinfos": [{"path", "mdoRef", "diagnostics": [{"range":
// {"start": {"line", "character"}, "end": …} (0-based), "severity", "code",
// "source", "message"}], "metrics"}]}. Diagnostics below minRank are dropped.
func parseBSLReport(report []byte, srcDir string, copied map[string]string, minRank int) (bslCheckOut, error) {
	var rep struct {
		FileInfos []struct {
			Path        string `json:"path"`
			Diagnostics []struct {
				Range struct {
					Start struct{ Line, Character int } `json:"start"`
					End   struct{ Line, Character int } `json:"end"`
				} `json:"range"`
				Severity json.RawMessage `json:"severity"`
				Code     json.RawMessage `json:"code"`
				Message  json.RawMessage `json:"message"`
			} `json:"diagnostics"`
		} `json:"fileinfos"`
	}
	if err := json.Unmarshal(report, &rep); err != nil {
		return bslCheckOut{}, fmt.Errorf("%w: %s's report %s is not the json reporter's format: %v", sandbox.ErrWrongState, bslServer, bslReport, err)
	}
	out := bslCheckOut{Diagnostics: []bslDiagnostic{}, Counts: map[string]int{}, FilesAnalyzed: len(rep.FileInfos)}
	for _, s := range bslSeverities {
		out.Counts[s] = 0
	}
	for _, fi := range rep.FileInfos {
		file := bslFile(fi.Path, srcDir, copied)
		for _, d := range fi.Diagnostics {
			sev := bslSeverity(d.Severity)
			if severityRank(sev) > minRank {
				continue
			}
			out.Counts[sev]++
			out.Diagnostics = append(out.Diagnostics, bslDiagnostic{
				File: file, Line: d.Range.Start.Line + 1, Column: d.Range.Start.Character + 1,
				EndLine: d.Range.End.Line + 1, EndColumn: d.Range.End.Character + 1,
				Severity: sev, Code: bslCode(d.Code), Message: bslMessage(d.Message),
			})
		}
	}
	sort.SliceStable(out.Diagnostics, func(i, j int) bool {
		a, b := out.Diagnostics[i], out.Diagnostics[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	if len(out.Diagnostics) > bslDiagnosticsMax {
		out.Diagnostics, out.Truncated = out.Diagnostics[:bslDiagnosticsMax], true
	}
	return out, nil
}

// bslMessage reads a diagnostic's message: a string, or an LSP 3.18
// MarkupContent ({"kind", "value"}).
func bslMessage(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var m struct {
		Value string `json:"value"`
	}
	if json.Unmarshal(raw, &m) == nil {
		return m.Value
	}
	return string(raw)
}
