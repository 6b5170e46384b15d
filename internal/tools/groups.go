package tools

// The tool families, each defined in its own file.

func shellTools() []*Tool { return append([]*Tool{bashTool()}, sessionTools()...) }
