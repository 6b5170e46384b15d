// This file holds seed 004's file tools: file_read, file_write, file_delete,
// file_list and file_search, each one call of the sandbox's agent.

package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
)

// Bounds of the file tools.
const (
	fileReadPage    = 1 << 20  // bytes read from the agent at a time
	fileReadScan    = 64 << 20 // bytes of a file file_read reads through at most
	fileReadMax     = 256 << 10
	fileListMax     = 2000
	fileListDepth   = 32
	fileSearchMax   = 500
	fileWriteMaxLen = 32 << 20
)

type fileReadIn struct {
	File      string `json:"file"`
	StartLine *int   `json:"start_line"`
	EndLine   *int   `json:"end_line"`
}

type fileReadOut struct {
	File       string `json:"file"`
	Content    string `json:"content"`
	StartLine  int    `json:"start_line"`
	EndLine    int    `json:"end_line"`
	TotalLines *int   `json:"total_lines,omitempty"`
	Size       int64  `json:"size"`
	Truncated  bool   `json:"truncated"`
}

func (o fileReadOut) Text() string {
	s := o.Content
	if o.Truncated {
		s += fmt.Sprintf("\n[file_read: stopped after line %d (%d KiB returned at most); continue with start_line %d]", o.EndLine, fileReadMax>>10, o.EndLine+1)
	}
	if s == "" {
		if o.TotalLines != nil {
			return fmt.Sprintf("(no lines: %s has %d lines)", o.File, *o.TotalLines)
		}
		return "(empty)"
	}
	return s
}

type fileWriteIn struct {
	File    string `json:"file"`
	Content string `json:"content"`
	Append  bool   `json:"append"`
}

type fileWriteOut struct {
	File         string `json:"file"`
	BytesWritten int    `json:"bytes_written"`
	Size         int64  `json:"size"`
}

func (o fileWriteOut) Text() string {
	return fmt.Sprintf("wrote %d bytes to %s (now %d bytes)", o.BytesWritten, o.File, o.Size)
}

type fileDeleteIn struct {
	File      string `json:"file"`
	Recursive bool   `json:"recursive"`
}

type fileDeleteOut struct {
	File    string `json:"file"`
	Deleted bool   `json:"deleted"`
	Type    string `json:"type"`
}

func (o fileDeleteOut) Text() string { return fmt.Sprintf("deleted %s %s", o.Type, o.File) }

type fileListIn struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
}

type fileEntry struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	IsDir    bool   `json:"is_dir"`
	Type     string `json:"type"`
	Size     int64  `json:"size"`
	Modified string `json:"modified"`
	Target   string `json:"symlink_target,omitempty"`
}

type fileListOut struct {
	Path      string      `json:"path"`
	Entries   []fileEntry `json:"entries"`
	Total     int         `json:"total"`
	Truncated bool        `json:"truncated"`
}

func (o fileListOut) Text() string {
	var b strings.Builder
	for _, e := range o.Entries {
		switch {
		case e.IsDir:
			fmt.Fprintf(&b, "%s/\n", e.Path)
		case e.Type == "symlink":
			fmt.Fprintf(&b, "%s -> %s\n", e.Path, e.Target)
		default:
			fmt.Fprintf(&b, "%s\t%d\n", e.Path, e.Size)
		}
	}
	if o.Truncated {
		fmt.Fprintf(&b, "[file_list: %d of %d entries shown]\n", len(o.Entries), o.Total)
	}
	if b.Len() == 0 {
		return "(empty directory)"
	}
	return b.String()
}

type fileSearchIn struct {
	File    string `json:"file"`
	Regex   string `json:"regex"`
	Include string `json:"include"`
}

type fileMatch struct {
	File string `json:"file"`
	Line int64  `json:"line"`
	Text string `json:"text"`
}

type fileSearchOut struct {
	Matches   []fileMatch `json:"matches"`
	Truncated bool        `json:"truncated"`
}

func (o fileSearchOut) Text() string {
	var b strings.Builder
	for _, m := range o.Matches {
		fmt.Fprintf(&b, "%s:%d:%s\n", m.File, m.Line, m.Text)
	}
	if o.Truncated {
		fmt.Fprintf(&b, "[file_search: stopped at %d matches; narrow the regex or the path]\n", len(o.Matches))
	}
	if b.Len() == 0 {
		return "(no matches)"
	}
	return b.String()
}

func fileTools004() []*Tool {
	return []*Tool{
		define(Tool{
			Name:  "file_read",
			Title: "Read a text file",
			Description: "Read a text file in the sandbox and return its content, whole or lines start_line to end_line " +
				"(1-based, both included). Relative paths start at /workspace. Returns content, the lines it spans " +
				"(start_line, end_line), total_lines (when the file was read to its end), size in bytes, and " +
				"truncated when the content would pass 256 KiB: it then ends at a whole line; continue with " +
				"start_line = end_line + 1. A start_line past the end gives empty content. Binary files (a NUL " +
				"byte in the first 8 KiB) are refused: look at them with shell_exec (e.g. `od -c FILE | head`). " +
				"Invalid UTF-8 is replaced with U+FFFD. Files are read up to their first 64 MiB.",
			Capability: CapFiles,
			ReadOnly:   true,
			Input: json.RawMessage(`{
  "type": "object",
  "required": ["file"],
  "properties": {
    "file": {"type": "string", "description": "Path of the file, e.g. \"app.py\" or \"/etc/os-release\"."},
    "start_line": {"type": "integer", "minimum": 1, "description": "First line to return (1-based). Default 1."},
    "end_line": {"type": "integer", "minimum": 1, "description": "Last line to return (included). Default: the last line."}
  },
  "additionalProperties": false
}`),
			Output: json.RawMessage(`{
  "type": "object",
  "required": ["file", "content", "start_line", "end_line", "size", "truncated"],
  "properties": {
    "file": {"type": "string", "description": "The file's absolute path."},
    "content": {"type": "string", "description": "The lines read, with their line breaks."},
    "start_line": {"type": "integer", "description": "The first line returned."},
    "end_line": {"type": "integer", "description": "The last line returned (start_line - 1 when none)."},
    "total_lines": {"type": "integer", "description": "The file's number of lines, when it was read to its end."},
    "size": {"type": "integer", "description": "The file's size in bytes."},
    "truncated": {"type": "boolean", "description": "The content stops before end_line (or the file's end) to stay within 256 KiB."}
  }
}`),
		}, runFileRead),
		define(Tool{
			Name:  "file_write",
			Title: "Write a file",
			Description: "Write content to a file in the sandbox, replacing it (or, with append true, adding to its " +
				"end), creating the file and its parent directories as needed. Relative paths start at /workspace. " +
				"content is text written as given (UTF-8); at most 32 MiB. New files get mode 0644. Returns file " +
				"(absolute path), bytes_written and the file's size afterwards.",
			Capability:  CapFiles,
			Destructive: true,
			Input: json.RawMessage(`{
  "type": "object",
  "required": ["file", "content"],
  "properties": {
    "file": {"type": "string", "description": "Path of the file, e.g. \"app.py\"."},
    "content": {"type": "string", "description": "The text to write."},
    "append": {"type": "boolean", "default": false, "description": "Add to the end of the file instead of replacing it."}
  },
  "additionalProperties": false
}`),
			Output: json.RawMessage(`{
  "type": "object",
  "required": ["file", "bytes_written", "size"],
  "properties": {
    "file": {"type": "string"},
    "bytes_written": {"type": "integer"},
    "size": {"type": "integer", "description": "The file's size after the write."}
  }
}`),
		}, runFileWrite),
		define(Tool{
			Name:  "file_delete",
			Title: "Delete a file",
			Description: "Delete a file, symlink or empty directory in the sandbox; with recursive true, a directory " +
				"and everything in it. Relative paths start at /workspace. A path that does not exist is an error " +
				"naming it; so is a non-empty directory without recursive. / cannot be deleted. Returns file " +
				"(absolute path), deleted and the type that was deleted (file, dir, symlink, other).",
			Capability:  CapFiles,
			Destructive: true,
			Input: json.RawMessage(`{
  "type": "object",
  "required": ["file"],
  "properties": {
    "file": {"type": "string", "description": "Path to delete."},
    "recursive": {"type": "boolean", "default": false, "description": "Delete a directory with everything in it."}
  },
  "additionalProperties": false
}`),
			Output: json.RawMessage(`{
  "type": "object",
  "required": ["file", "deleted", "type"],
  "properties": {
    "file": {"type": "string"},
    "deleted": {"type": "boolean"},
    "type": {"type": "string", "enum": ["file", "dir", "symlink", "other"]}
  }
}`),
		}, runFileDelete),
		define(Tool{
			Name:  "file_list",
			Title: "List a directory",
			Description: "List the entries of a directory in the sandbox, sorted by name; with recursive true, " +
				"everything below it too (32 levels at most, not following symlinked directories, and not the " +
				"insides of .git directories). Relative paths start at /workspace. Each entry has name, path " +
				"(absolute), is_dir, type (file, dir, symlink, other), size in bytes, modified (RFC 3339) and, for " +
				"a symlink, symlink_target. At most 2000 entries are returned: truncated is then true and total " +
				"says how many there are; list a subdirectory or use file_search to narrow down.",
			Capability: CapFiles,
			ReadOnly:   true,
			Input: json.RawMessage(`{
  "type": "object",
  "required": ["path"],
  "properties": {
    "path": {"type": "string", "description": "The directory, e.g. \".\" or \"/workspace/src\"."},
    "recursive": {"type": "boolean", "default": false, "description": "Also list everything below the directory."}
  },
  "additionalProperties": false
}`),
			Output: json.RawMessage(`{
  "type": "object",
  "required": ["path", "entries", "total", "truncated"],
  "properties": {
    "path": {"type": "string", "description": "The directory's absolute path."},
    "entries": {"type": "array", "items": {
      "type": "object",
      "required": ["name", "path", "is_dir", "type", "size", "modified"],
      "properties": {
        "name": {"type": "string"},
        "path": {"type": "string"},
        "is_dir": {"type": "boolean"},
        "type": {"type": "string", "enum": ["file", "dir", "symlink", "other"]},
        "size": {"type": "integer"},
        "modified": {"type": "string", "format": "date-time"},
        "symlink_target": {"type": "string"}
      }
    }},
    "total": {"type": "integer", "description": "How many entries there are, returned or not."},
    "truncated": {"type": "boolean"}
  }
}`),
		}, runFileList),
		define(Tool{
			Name:  "file_search",
			Title: "Search files with a regular expression",
			Description: "Find the lines matching a regular expression in a file, or in every file below a directory " +
				"(recursively; include narrows it to file names matching a glob such as \"*.py\"). Relative paths " +
				"start at /workspace. The regex is RE2 syntax (Go's regexp: no backreferences or lookaround), " +
				"matched against each line; prefix (?i) to ignore case. Binary files and files over 16 MiB are " +
				"skipped. Returns matches with file (absolute path), line (1-based) and text (the line, cut at " +
				"1000 bytes), at most 500; truncated is true when there were more (or the search ran past 20 s).",
			Capability: CapFiles,
			ReadOnly:   true,
			Input: json.RawMessage(`{
  "type": "object",
  "required": ["file", "regex"],
  "properties": {
    "file": {"type": "string", "description": "A file, or a directory searched recursively."},
    "regex": {"type": "string", "description": "RE2 regular expression, e.g. \"def \\\\w+\\\\(\" or \"(?i)todo\"."},
    "include": {"type": "string", "description": "Only files whose name matches this glob (e.g. \"*.go\"), when file is a directory."}
  },
  "additionalProperties": false
}`),
			Output: json.RawMessage(`{
  "type": "object",
  "required": ["matches", "truncated"],
  "properties": {
    "matches": {"type": "array", "items": {
      "type": "object",
      "required": ["file", "line", "text"],
      "properties": {
        "file": {"type": "string"},
        "line": {"type": "integer"},
        "text": {"type": "string"}
      }
    }},
    "truncated": {"type": "boolean"}
  }
}`),
		}, runFileSearch),
	}
}

func runFileRead(ctx context.Context, c *Call, in fileReadIn) (fileReadOut, error) {
	file, err := sandboxPath("file", in.File)
	if err != nil {
		return fileReadOut{}, err
	}
	start, end := 1, 0 // end 0: to the file's end
	if in.StartLine != nil {
		if start = *in.StartLine; start < 1 {
			return fileReadOut{}, sandbox.Invalid("start_line", "%d is below 1 (lines count from 1)", start)
		}
	}
	if in.EndLine != nil {
		if end = *in.EndLine; end < start {
			return fileReadOut{}, sandbox.Invalid("end_line", "%d is before start_line %d", end, start)
		}
	}
	out := fileReadOut{File: file, StartLine: start, EndLine: start - 1}
	var (
		content []byte
		line    = 1    // the line the next byte belongs to
		offset  int64  // of the next page
		partial []byte // the unfinished last line of the pages so far
		first   = true
	)
	for {
		r, err := c.M().ReadFile(ctx, c.Sandbox, file, offset, fileReadPage)
		if err != nil {
			return fileReadOut{}, c.own(err)
		}
		out.File, out.Size = r.Path, r.Size
		if first && bytes.IndexByte(r.Content[:min(len(r.Content), 8192)], 0) >= 0 {
			return fileReadOut{}, sandbox.Invalid("file", "'%s' is a binary file (%d bytes); file_read returns text", r.Path, r.Size)
		}
		first = false
		offset += int64(len(r.Content))
		buf := append(partial, r.Content...)
		partial = nil
		for len(buf) > 0 {
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				if !r.EOF {
					partial = buf
					break
				}
				i = len(buf) - 1 // the last line, with no line break
			}
			l := buf[:i+1]
			buf = buf[i+1:]
			if line >= start && (end == 0 || line <= end) {
				if len(content)+len(l) > fileReadMax {
					if len(content) == 0 { // one line longer than the bound: its head
						content, out.EndLine = l[:fileReadMax], line
					}
					out.Truncated = true
					out.Content = strings.ToValidUTF8(string(content), "\uFFFD")
					return out, nil
				}
				content = append(content, l...)
				out.EndLine = line
			}
			line++
			if end != 0 && line > end {
				out.Content = strings.ToValidUTF8(string(content), "\uFFFD")
				return out, nil
			}
		}
		if r.EOF || len(r.Content) == 0 {
			break
		}
		if offset >= fileReadScan {
			if len(content) > 0 {
				out.Truncated = true
				out.Content = strings.ToValidUTF8(string(content), "\uFFFD")
				return out, nil
			}
			return fileReadOut{}, sandbox.Invalid("start_line", "line %d lies beyond the first %d MiB of '%s', which is as far as file_read reads; use shell_exec (e.g. sed -n '%d,%dp' FILE)",
				start, fileReadScan>>20, file, start, max(end, start+100))
		}
	}
	total := line - 1
	out.TotalLines = &total
	out.Content = strings.ToValidUTF8(string(content), "\uFFFD")
	return out, nil
}

func runFileWrite(ctx context.Context, c *Call, in fileWriteIn) (fileWriteOut, error) {
	file, err := sandboxPath("file", in.File)
	if err != nil {
		return fileWriteOut{}, err
	}
	if len(in.Content) > fileWriteMaxLen {
		return fileWriteOut{}, sandbox.Invalid("content", "is %d bytes, more than %d", len(in.Content), fileWriteMaxLen)
	}
	fi, err := c.M().WriteFile(ctx, c.Sandbox, file, []byte(in.Content), 0o644, in.Append)
	if err != nil {
		return fileWriteOut{}, c.own(err)
	}
	return fileWriteOut{File: fi.Path, BytesWritten: len(in.Content), Size: fi.Size}, nil
}

func runFileDelete(ctx context.Context, c *Call, in fileDeleteIn) (fileDeleteOut, error) {
	file, err := sandboxPath("file", in.File)
	if err != nil {
		return fileDeleteOut{}, err
	}
	if file == "/" {
		return fileDeleteOut{}, sandbox.Invalid("file", "/ cannot be deleted")
	}
	fi, err := c.M().Stat(ctx, c.Sandbox, file)
	if err != nil {
		return fileDeleteOut{}, c.own(err)
	}
	if fi.Type == "dir" && !in.Recursive {
		ents, err := c.M().ListDir(ctx, c.Sandbox, file, 1)
		if err != nil {
			return fileDeleteOut{}, c.own(err)
		}
		if len(ents) > 0 {
			return fileDeleteOut{}, fmt.Errorf("%w: '%s' is a directory with %d entries; give recursive true to delete it with everything in it",
				sandbox.ErrWrongState, fi.Path, len(ents))
		}
	}
	if err := c.M().Remove(ctx, c.Sandbox, file); err != nil {
		return fileDeleteOut{}, c.own(err)
	}
	return fileDeleteOut{File: fi.Path, Deleted: true, Type: fi.Type}, nil
}

func runFileList(ctx context.Context, c *Call, in fileListIn) (fileListOut, error) {
	dir, err := sandboxPath("path", in.Path)
	if err != nil {
		return fileListOut{}, err
	}
	depth := 1
	if in.Recursive {
		depth = fileListDepth
	}
	fis, err := c.M().ListDir(ctx, c.Sandbox, dir, depth)
	if err != nil {
		return fileListOut{}, c.own(err)
	}
	return listEntries(dir, fis, in.Recursive), nil
}

// listEntries turns a listing of dir into file_list's result: the insides
// of .git directories below dir are left out of a recursive one, and at most
// fileListMax entries are kept.
func listEntries(dir string, fis []sandbox.FileInfo, recursive bool) fileListOut {
	out := fileListOut{Path: dir, Entries: []fileEntry{}}
	for _, fi := range fis {
		if recursive {
			rel := strings.TrimPrefix(fi.Path, strings.TrimSuffix(dir, "/")+"/")
			if i := strings.Index("/"+rel, "/.git/"); i >= 0 {
				continue
			}
		}
		out.Total++
		if len(out.Entries) >= fileListMax {
			out.Truncated = true
			continue
		}
		out.Entries = append(out.Entries, fileEntry{Name: fi.Name, Path: fi.Path, IsDir: fi.Type == "dir", Type: fi.Type,
			Size: fi.Size, Modified: fi.ModTime.UTC().Format(time.RFC3339), Target: fi.SymlinkTarget})
	}
	return out
}

func runFileSearch(ctx context.Context, c *Call, in fileSearchIn) (fileSearchOut, error) {
	file, err := sandboxPath("file", in.File)
	if err != nil {
		return fileSearchOut{}, err
	}
	if in.Regex == "" {
		return fileSearchOut{}, sandbox.Invalid("regex", "is empty")
	}
	if _, err := regexp.Compile(in.Regex); err != nil {
		return fileSearchOut{}, sandbox.Invalid("regex", "%q does not compile: %v", truncate(in.Regex, 200), strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	if in.Include != "" && (strings.Contains(in.Include, "/") || !utf8.ValidString(in.Include)) {
		return fileSearchOut{}, sandbox.Invalid("include", "%q is not a file-name glob (no '/')", truncate(in.Include, 80))
	}
	ms, truncated, err := c.M().Grep(ctx, c.Sandbox, manager.GrepRequest{Pattern: in.Regex, Path: file, Include: in.Include, Limit: fileSearchMax})
	if err != nil {
		return fileSearchOut{}, c.own(err)
	}
	out := fileSearchOut{Matches: make([]fileMatch, 0, len(ms)), Truncated: truncated}
	for _, m := range ms {
		out.Matches = append(out.Matches, fileMatch{File: m.Path, Line: m.Line, Text: m.Text})
	}
	return out, nil
}
