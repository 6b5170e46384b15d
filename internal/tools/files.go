// This file implements deepagents' filesystem tools (seed 002) with their
// parameter names: ls, read_file, write_file, edit_file, glob, grep. Each is
// one agent call; the agent does the work next to the files (paging, search,
// the fuzzy edit), so a 100 000-file tree or a 1 GB file costs what the
// answer costs.

package tools

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
)

// Paging bounds of read_file.
const (
	readDefaultLimit = 2000
	readMaxLimit     = 100000
	readMaxLineChars = 2000
)

// Result bounds of the search tools.
const (
	globLimit = 1000
	grepLimit = 1000
)

func fileTools() []*Tool {
	return []*Tool{lsTool(), readFileTool(), writeFileTool(), editFileTool(), globTool(), grepTool()}
}

// ls

type lsIn struct {
	Path string `json:"path"`
}

type lsEntry struct {
	Path       string `json:"path"`
	IsDir      bool   `json:"is_dir"`
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modified_at"`
}

type lsOut struct {
	Path    string    `json:"path"`
	Entries []lsEntry `json:"entries"`
}

func (o lsOut) Text() string {
	if len(o.Entries) == 0 {
		return o.Path + " is empty"
	}
	var b strings.Builder
	for _, e := range o.Entries {
		if e.IsDir {
			fmt.Fprintf(&b, "%s/\n", e.Path)
		} else {
			fmt.Fprintf(&b, "%s (%d bytes)\n", e.Path, e.Size)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func lsTool() *Tool {
	return define(Tool{
		Name:  "ls",
		Title: "List a directory",
		Description: "List the files and directories in a directory of the sandbox, with each entry's absolute path, " +
			"whether it is a directory, its size in bytes and its modification time. Use it to explore before " +
			"reading or editing. path is absolute, or relative to /workspace; default /workspace.",
		Capability: CapFiles,
		ReadOnly:   true,
		Input: []byte(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "default": "/workspace", "description": "Directory to list: absolute, or relative to /workspace. Default /workspace."}
  },
  "additionalProperties": false
}`),
		Output: []byte(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "The directory listed (absolute)."},
    "entries": {"type": "array", "items": {"type": "object", "properties": {
      "path": {"type": "string"}, "is_dir": {"type": "boolean"}, "size": {"type": "integer"},
      "modified_at": {"type": "string", "description": "RFC 3339 time of the last modification."}
    }, "required": ["path", "is_dir", "size", "modified_at"]}}
  },
  "required": ["path", "entries"]
}`),
	}, func(ctx context.Context, c *Call, in lsIn) (lsOut, error) {
		if in.Path == "" {
			in.Path = Workspace
		}
		dir, err := sandboxPath("path", in.Path)
		if err != nil {
			return lsOut{}, err
		}
		infos, err := c.M().ListDir(ctx, c.Sandbox, dir, 1)
		if err != nil {
			return lsOut{}, err
		}
		out := lsOut{Path: dir, Entries: []lsEntry{}}
		for _, fi := range infos {
			out.Entries = append(out.Entries, lsEntry{Path: fi.Path, IsDir: fi.Type == "dir", Size: fi.Size,
				ModifiedAt: fi.ModTime.UTC().Format(time.RFC3339)})
		}
		return out, nil
	})
}

// read_file

type readIn struct {
	FilePath string `json:"file_path"`
	Offset   *int64 `json:"offset"`
	Limit    *int64 `json:"limit"`
}

type readOut struct {
	FilePath string `json:"file_path"`
	// Content is the lines read, each numbered as cat -n does (1-based).
	Content    string `json:"content"`
	Offset     int64  `json:"offset"`
	Lines      int    `json:"lines"`
	EOF        bool   `json:"eof"`
	TotalLines *int64 `json:"total_lines,omitempty"`
	CutLines   int64  `json:"cut_lines"`
}

func (o readOut) Text() string {
	if o.Lines == 0 && o.Offset == 0 && o.EOF {
		return "System reminder: " + o.FilePath + " exists but is empty."
	}
	s := o.Content
	if !o.EOF {
		s += fmt.Sprintf("\n[more lines follow: read on with offset=%d]", o.Offset+int64(o.Lines))
	}
	if o.CutLines > 0 {
		s += fmt.Sprintf("\n[%d lines longer than %d characters were cut]", o.CutLines, readMaxLineChars)
	}
	return s
}

func readFileTool() *Tool {
	return define(Tool{
		Name:  "read_file",
		Title: "Read a file",
		Description: "Read a text file of the sandbox, with line numbers (cat -n format: the 1-based number, a tab, the " +
			"line). By default reads up to 2000 lines from the start; for big files read a window with offset (the " +
			"0-based line to start at) and limit (how many lines), and go on from where the last read ended. Lines " +
			"longer than 2000 characters are cut. Also pages through the full output a truncated command result " +
			"points to. Binary files are refused.",
		Capability: CapFiles,
		ReadOnly:   true,
		Input: []byte(`{
  "type": "object",
  "properties": {
    "file_path": {"type": "string", "description": "File to read: absolute, or relative to /workspace."},
    "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "0-based line number to start reading at."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 100000, "default": 2000, "description": "Most lines to read."}
  },
  "required": ["file_path"],
  "additionalProperties": false
}`),
		Output: []byte(`{
  "type": "object",
  "properties": {
    "file_path": {"type": "string"},
    "content": {"type": "string", "description": "The lines read, numbered like cat -n (1-based)."},
    "offset": {"type": "integer", "description": "0-based line number of the first line read."},
    "lines": {"type": "integer", "description": "How many lines were read."},
    "eof": {"type": "boolean", "description": "True when the read reached the end of the file."},
    "total_lines": {"type": "integer", "description": "Lines in the file, when the read reached its end."},
    "cut_lines": {"type": "integer", "description": "Lines cut at 2000 characters."}
  },
  "required": ["file_path", "content", "offset", "lines", "eof", "cut_lines"]
}`),
	}, runReadFile)
}

func runReadFile(ctx context.Context, c *Call, in readIn) (readOut, error) {
	p, err := sandboxPath("file_path", in.FilePath)
	if err != nil {
		return readOut{}, err
	}
	var offset int64
	if in.Offset != nil {
		if offset = *in.Offset; offset < 0 {
			return readOut{}, sandbox.Invalid("offset", "%d is below 0", offset)
		}
	}
	limit := int64(readDefaultLimit)
	if in.Limit != nil {
		if limit = *in.Limit; limit < 1 || limit > readMaxLimit {
			return readOut{}, sandbox.Invalid("limit", "%d is outside the range 1–%d", limit, readMaxLimit)
		}
	}
	var page sandbox.Lines
	err = c.M().Call(ctx, c.Tool, c.Sandbox, func(cl *agentclient.Client) error {
		page, err = cl.ReadLines(ctx, p, offset, limit, readMaxLineChars)
		return err
	})
	if err != nil {
		return readOut{}, err
	}
	if len(page.Lines) == 0 && offset > 0 && page.EOF {
		return readOut{}, sandbox.Invalid("offset", "line %d is past the end of %s (%d lines)", offset, p, page.TotalLines)
	}
	var b strings.Builder
	for i, l := range page.Lines {
		fmt.Fprintf(&b, "%6d\t%s\n", page.FirstLine+int64(i), l) // FirstLine is 1-based
	}
	out := readOut{FilePath: p, Content: strings.TrimSuffix(b.String(), "\n"), Offset: offset,
		Lines: len(page.Lines), EOF: page.EOF, CutLines: page.CutLines}
	if page.EOF {
		n := page.TotalLines
		out.TotalLines = &n
	}
	return out, nil
}

// write_file

type writeIn struct {
	FilePath string `json:"file_path"`
	Content  string `json:"content"`
}

type writeOut struct {
	FilePath string `json:"file_path"`
	Bytes    int64  `json:"bytes"`
}

func (o writeOut) Text() string { return fmt.Sprintf("Wrote %d bytes to %s", o.Bytes, o.FilePath) }

func writeFileTool() *Tool {
	return define(Tool{
		Name:  "write_file",
		Title: "Create a file",
		Description: "Create a new text file in the sandbox with the given content, making missing parent " +
			"directories. It refuses to overwrite an existing file: to change one, read it and use edit_file (or " +
			"write to a new path). file_path is absolute, or relative to /workspace.",
		Capability: CapFiles,
		Input: []byte(`{
  "type": "object",
  "properties": {
    "file_path": {"type": "string", "description": "File to create: absolute, or relative to /workspace."},
    "content": {"type": "string", "description": "The whole content of the new file."}
  },
  "required": ["file_path", "content"],
  "additionalProperties": false
}`),
		Output: []byte(`{
  "type": "object",
  "properties": {
    "file_path": {"type": "string", "description": "The file written (absolute)."},
    "bytes": {"type": "integer", "description": "Its size in bytes."}
  },
  "required": ["file_path", "bytes"]
}`),
	}, func(ctx context.Context, c *Call, in writeIn) (writeOut, error) {
		p, err := sandboxPath("file_path", in.FilePath)
		if err != nil {
			return writeOut{}, err
		}
		if _, err := c.M().Stat(ctx, c.Sandbox, p); err == nil {
			return writeOut{}, fmt.Errorf("%w: cannot write to %s because it already exists; read it and then make an edit with edit_file, or write to a new path", sandbox.ErrExists, p)
		} else if !errors.Is(err, sandbox.ErrNotFound) {
			return writeOut{}, err
		}
		fi, err := c.M().WriteFile(ctx, c.Sandbox, p, []byte(in.Content), 0o644, false)
		if err != nil {
			return writeOut{}, err
		}
		return writeOut{FilePath: p, Bytes: fi.Size}, nil
	})
}

// edit_file

type editIn struct {
	FilePath   string `json:"file_path"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all"`
}

type editOut struct {
	FilePath     string  `json:"file_path"`
	Replacements int     `json:"replacements"`
	Strategy     string  `json:"strategy"`
	Score        float64 `json:"score"`
	StartLine    int64   `json:"start_line"`
	EndLine      int64   `json:"end_line"`
}

func (o editOut) Text() string {
	s := fmt.Sprintf("Replaced %d occurrence(s) in %s (lines %d-%d)", o.Replacements, o.FilePath, o.StartLine, o.EndLine)
	if o.Strategy != "exact" {
		s += fmt.Sprintf("; old_string was not found exactly: matched by %s comparison (score %.2f) — check the result", o.Strategy, o.Score)
	}
	return s
}

func editFileTool() *Tool {
	return define(Tool{
		Name:  "edit_file",
		Title: "Edit a file",
		Description: "Replace text in a file of the sandbox: old_string is replaced by new_string. old_string must " +
			"match exactly once (give enough surrounding lines to make it unique) unless replace_all is true. When " +
			"the exact text is not found, a fuzzy fallback looks for it ignoring trailing whitespace, then " +
			"indentation, then by similarity (score ≥ 0.85); the result says which strategy matched, its score and " +
			"the lines replaced. Several equally good matches are refused with their line numbers; nothing is " +
			"written when the call fails. Read the file first.",
		Capability: CapFiles,
		Input: []byte(`{
  "type": "object",
  "properties": {
    "file_path": {"type": "string", "description": "File to edit: absolute, or relative to /workspace."},
    "old_string": {"type": "string", "description": "The text to replace, with enough context to be unique."},
    "new_string": {"type": "string", "description": "The text to put in its place (must differ from old_string)."},
    "replace_all": {"type": "boolean", "default": false, "description": "Replace every occurrence instead of exactly one."}
  },
  "required": ["file_path", "old_string", "new_string"],
  "additionalProperties": false
}`),
		Output: []byte(`{
  "type": "object",
  "properties": {
    "file_path": {"type": "string"},
    "replacements": {"type": "integer", "description": "How many occurrences were replaced."},
    "strategy": {"type": "string", "enum": ["exact", "whitespace", "indentation", "fuzzy"], "description": "How old_string was matched."},
    "score": {"type": "number", "description": "Similarity of the matched text to old_string, 1 for an exact match."},
    "start_line": {"type": "integer", "description": "First line (1-based) of the first region replaced."},
    "end_line": {"type": "integer", "description": "Last line of that region."}
  },
  "required": ["file_path", "replacements", "strategy", "score", "start_line", "end_line"]
}`),
	}, func(ctx context.Context, c *Call, in editIn) (editOut, error) {
		p, err := sandboxPath("file_path", in.FilePath)
		if err != nil {
			return editOut{}, err
		}
		var r sandbox.EditResult
		err = c.M().Call(ctx, c.Tool, c.Sandbox, func(cl *agentclient.Client) error {
			r, err = cl.EditFile(ctx, p, in.OldString, in.NewString, in.ReplaceAll)
			return err
		})
		if err != nil {
			return editOut{}, err
		}
		return editOut{FilePath: p, Replacements: r.Replacements, Strategy: r.Strategy, Score: r.Score,
			StartLine: r.StartLine, EndLine: r.EndLine}, nil
	})
}

// glob

type globIn struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path"`
}

type globOut struct {
	Paths     []string `json:"paths"`
	Truncated bool     `json:"truncated"`
}

func (o globOut) Text() string {
	if len(o.Paths) == 0 {
		return "No files found"
	}
	s := strings.Join(o.Paths, "\n")
	if o.Truncated {
		s += fmt.Sprintf("\n[only the first %d paths; narrow the pattern]", len(o.Paths))
	}
	return s
}

func globTool() *Tool {
	return define(Tool{
		Name:  "glob",
		Title: "Find files by pattern",
		Description: "Find files whose path matches a glob pattern, relative to path (default /workspace): * and ? " +
			"match within a name, [abc] a set, ** any number of directories (e.g. **/*.py, src/**/test_*.go). " +
			"Returns absolute paths, at most 1000.",
		Capability: CapFiles,
		ReadOnly:   true,
		Input: []byte(`{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "description": "Glob pattern, e.g. **/*.py."},
    "path": {"type": "string", "default": "/workspace", "description": "Directory the pattern is relative to. Default /workspace."}
  },
  "required": ["pattern"],
  "additionalProperties": false
}`),
		Output: []byte(`{
  "type": "object",
  "properties": {
    "paths": {"type": "array", "items": {"type": "string"}, "description": "Matching paths (absolute)."},
    "truncated": {"type": "boolean", "description": "True when more paths matched than were returned."}
  },
  "required": ["paths", "truncated"]
}`),
	}, func(ctx context.Context, c *Call, in globIn) (globOut, error) {
		if in.Pattern == "" {
			return globOut{}, sandbox.Invalid("pattern", "is empty")
		}
		if in.Path == "" {
			in.Path = Workspace
		}
		dir, err := sandboxPath("path", in.Path)
		if err != nil {
			return globOut{}, err
		}
		paths, more, err := c.M().Glob(ctx, c.Sandbox, in.Pattern, dir, globLimit)
		if err != nil {
			return globOut{}, err
		}
		if paths == nil {
			paths = []string{}
		}
		return globOut{Paths: paths, Truncated: more}, nil
	})
}

// grep

type grepIn struct {
	Pattern    string `json:"pattern"`
	Path       string `json:"path"`
	Glob       string `json:"glob"`
	OutputMode string `json:"output_mode"`
	Regex      bool   `json:"regex"`
	IgnoreCase bool   `json:"ignore_case"`
}

type grepMatch struct {
	Path string `json:"path"`
	Line int64  `json:"line"`
	Text string `json:"text"`
}

type grepCount struct {
	Path  string `json:"path"`
	Count int64  `json:"count"`
}

type grepOut struct {
	OutputMode string      `json:"output_mode"`
	Files      []string    `json:"files,omitempty"`
	Matches    []grepMatch `json:"matches,omitempty"`
	Counts     []grepCount `json:"counts,omitempty"`
	Truncated  bool        `json:"truncated"`
}

func (o grepOut) Text() string {
	var lines []string
	switch o.OutputMode {
	case "content":
		for _, m := range o.Matches {
			lines = append(lines, fmt.Sprintf("%s:%d:%s", m.Path, m.Line, m.Text))
		}
	case "count":
		for _, n := range o.Counts {
			lines = append(lines, fmt.Sprintf("%s:%d", n.Path, n.Count))
		}
	default:
		lines = o.Files
	}
	if len(lines) == 0 {
		return "No matches found"
	}
	s := strings.Join(lines, "\n")
	if o.Truncated {
		s += "\n[more matches than shown; narrow the search with path or glob]"
	}
	return s
}

func grepTool() *Tool {
	return define(Tool{
		Name:  "grep",
		Title: "Search file contents",
		Description: "Search the text files under path (default /workspace; a file or a directory, searched " +
			"recursively, binary files skipped) for pattern — a literal string by default, a regular expression " +
			"(RE2 syntax) with regex: true. glob limits the files searched (e.g. *.py or src/**/*.ts). " +
			"output_mode: files_with_matches (default: the files that match), content (each matching line as " +
			"path:line:text), count (matches per file). At most 1000 results.",
		Capability: CapFiles,
		ReadOnly:   true,
		Input: []byte(`{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "description": "Text to search for (literal unless regex is true)."},
    "path": {"type": "string", "default": "/workspace", "description": "File or directory to search. Default /workspace."},
    "glob": {"type": "string", "description": "Only search files matching this glob, e.g. *.py or src/**/*.ts."},
    "output_mode": {"type": "string", "enum": ["files_with_matches", "content", "count"], "default": "files_with_matches", "description": "files_with_matches: matching files; content: matching lines; count: matches per file."},
    "regex": {"type": "boolean", "default": false, "description": "Treat pattern as a regular expression (RE2 syntax)."},
    "ignore_case": {"type": "boolean", "default": false, "description": "Match regardless of case."}
  },
  "required": ["pattern"],
  "additionalProperties": false
}`),
		Output: []byte(`{
  "type": "object",
  "properties": {
    "output_mode": {"type": "string"},
    "files": {"type": "array", "items": {"type": "string"}, "description": "files_with_matches: the files that match."},
    "matches": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer"}, "text": {"type": "string"}}, "required": ["path", "line", "text"]}, "description": "content: each matching line."},
    "counts": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "count": {"type": "integer"}}, "required": ["path", "count"]}, "description": "count: matches per file."},
    "truncated": {"type": "boolean", "description": "True when there were more results than returned."}
  },
  "required": ["output_mode", "truncated"]
}`),
	}, runGrep)
}

func runGrep(ctx context.Context, c *Call, in grepIn) (grepOut, error) {
	if in.Pattern == "" {
		return grepOut{}, sandbox.Invalid("pattern", "is empty")
	}
	if in.Regex {
		if _, err := regexp.Compile(in.Pattern); err != nil {
			return grepOut{}, sandbox.Invalid("pattern", "is not a valid regular expression: %v", err)
		}
	}
	mode := in.OutputMode
	agentMode := map[string]string{"": "files", "files_with_matches": "files", "content": "content", "count": "count"}[mode]
	if agentMode == "" {
		return grepOut{}, sandbox.Invalid("output_mode", "%q is not one of files_with_matches, content, count", truncate(mode, 40))
	}
	if mode == "" {
		mode = "files_with_matches"
	}
	if in.Path == "" {
		in.Path = Workspace
	}
	p, err := sandboxPath("path", in.Path)
	if err != nil {
		return grepOut{}, err
	}
	req := manager.GrepRequest{Pattern: in.Pattern, Path: p, Glob: in.Glob, IgnoreCase: in.IgnoreCase,
		Fixed: !in.Regex, Limit: grepLimit, Mode: agentMode}
	found, more, err := c.M().Grep(ctx, c.Sandbox, req)
	if err != nil {
		return grepOut{}, err
	}
	out := grepOut{OutputMode: mode, Truncated: more}
	for _, m := range found {
		switch agentMode {
		case "content":
			out.Matches = append(out.Matches, grepMatch{Path: m.Path, Line: m.Line, Text: m.Text})
		case "count":
			out.Counts = append(out.Counts, grepCount{Path: m.Path, Count: m.Count})
		default:
			out.Files = append(out.Files, m.Path)
		}
	}
	return out, nil
}
