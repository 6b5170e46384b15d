package sandbox

import (
	"io/fs"
	"time"
)

// FileInfo describes one entry in a sandbox's filesystem.
type FileInfo struct {
	Name          string
	Path          string
	Type          string // file | dir | symlink | other
	Size          int64
	Mode          fs.FileMode // permission bits
	Permissions   string
	Owner, Group  string
	ModTime       time.Time
	SymlinkTarget string
}

// ReadResult is one page of a file.
type ReadResult struct {
	Path    string
	Content []byte
	Offset  int64
	Size    int64 // of the whole file
	EOF     bool
}

// GrepMatch is one matching line (content mode), or one file with a match
// (files and count modes).
type GrepMatch struct {
	Path string
	Line int64 // content mode: 1-based
	Text string
	// Count is, in count mode, the number of matching lines in the file.
	Count int64
}
