module example.com/sbx-quickstart

go 1.26.8

require sbx.dev/sbx v0.0.0

require github.com/coder/websocket v1.8.14 // indirect

replace sbx.dev/sbx => ../../..
