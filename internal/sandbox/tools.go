package sandbox

// OutputChunk is one read of a process's output log (ExecRequest.OutputLogBytes)
// by cursor.
type OutputChunk struct {
	// Data is the combined output (stdout and stderr in the order they came;
	// a PTY's terminal output) at offsets Start to Cursor.
	Data []byte
	// Start is the offset of Data[0]: greater than the since asked for when
	// the log no longer held what came between (it keeps the last
	// OutputLogBytes only). Cursor is Start+len(Data), the next read's since.
	Start, Cursor int64
	// End is how many bytes the process has written in all; Cursor < End
	// when the read's byte limit cut it short.
	End int64
	// Alive is false once the process exited and all its output is in the
	// log; Result is then set.
	Alive  bool
	Result *ExecResult
}

// Lines is a page of a text file by line number.
type Lines struct {
	// Lines are the lines without their line ends, each cut to the
	// character limit asked for.
	Lines []string
	// FirstLine is the 1-based number of Lines[0] (the 0-based offset asked
	// for, plus 1).
	FirstLine int64
	// EOF: no line follows the last one returned.
	EOF bool
	// CutLines is how many of Lines were cut.
	CutLines int64
	// TotalLines is the file's number of lines once EOF is reached; else -1.
	TotalLines int64
}

// EditResult says what a search-and-replace edit of a file did.
type EditResult struct {
	Replacements int
	// Exact: the old string was found as given.
	Exact bool
	// Score is 1 but for a fuzzy match: its similarity (at least 0.85).
	Score float64
	// StartLine and EndLine are the 1-based lines the first replacement
	// occupies in the edited file.
	StartLine, EndLine int64
	// Strategy is how the old string was found: exact, whitespace (trailing
	// whitespace ignored), indentation (leading whitespace ignored too) or
	// fuzzy.
	Strategy string
}
