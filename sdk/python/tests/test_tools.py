"""Tools: the list with schemas, any tool by name, the typed helpers, and
the errors of a bad call."""

from __future__ import annotations

from sbx import InvalidArgumentError, NotFoundError

from .support import LiveTest


class ToolsTest(LiveTest):
    def test_list(self) -> None:
        tools = {t.name: t for t in self.client.tools()}
        for name in ("sandbox_bash", "repl_execute", "edit_file", "read_file", "write_file", "sandbox.exec"):
            self.assertIn(name, tools)
        t = tools["edit_file"]
        self.assertEqual(t.capability, "tools.files")
        self.assertEqual(set(t.input_schema["required"]), {"file_path", "old_string", "new_string"})
        self.assertIn("replacements", t.output_schema["properties"])
        self.assertEqual([x.name for x in self.sb.tools.list()], [x.name for x in self.client.tools()])

    def test_call_by_name(self) -> None:
        r = self.sb.tools.call("sandbox_bash", {"command": "echo via-tool; exit 4"})
        self.assertEqual((r["stdout"], r["exit_code"]), ("via-tool\n", 4))
        r = self.sb.tools.call("shell_exec", command="pwd", exec_dir="/tmp")
        self.assertIn("/tmp", str(r))

    def test_typed_helpers(self) -> None:
        t = self.sb.tools
        b = t.sandbox_bash("echo hi > made.txt; echo done", cwd="/workspace")
        self.assertEqual((b["stdout"], b["exit_code"]), ("done\n", 0))
        self.assertIn("made.txt", str(b["files"]))

        w = t.write_file("tool/a.py", "x = 1\ny = 2\n")
        self.assertEqual(w["file_path"], "/workspace/tool/a.py")
        e = t.edit_file("tool/a.py", "y = 2", "y = 40 + 2")
        self.assertEqual((e["replacements"], e["strategy"]), (1, "exact"))
        self.assertEqual(self.sb.files.read_text("tool/a.py"), "x = 1\ny = 40 + 2\n")
        rf = t.read_file("tool/a.py")
        self.assertIn("y = 40 + 2", rf["content"])
        self.assertTrue(rf["eof"])
        self.assertIn("a.py", str(t.ls("tool")["entries"]))
        self.assertEqual(t.glob("tool/*.py")["paths"], ["/workspace/tool/a.py"])
        g = t.grep("40", "/workspace/tool", output_mode="content")
        self.assertIn("y = 40 + 2", str(g["matches"]))

        # The REPL keeps its state between calls.
        r1 = t.repl_execute("import os\nx = 6\nprint('side')\nx * 7")
        self.assertEqual((r1["value"], r1["stdout"]), ("42", "side\n"))
        r2 = t.repl_execute("x + 1")
        self.assertEqual(r2["value"], "7")
        self.assertGreater(r2["execution_count"], r1["execution_count"])
        r3 = t.repl_execute("1/0")
        self.assertEqual(r3["error"]["name"], "ZeroDivisionError")
        self.assertIn("1/0", r3["error"]["traceback"])
        r4 = t.repl_execute("'x' in dir()", restart=True)
        self.assertEqual(r4["value"], "False")

        c = t.run_code("python3", "import sys; print(sys.stdin.read().upper())", stdin="abc")
        self.assertEqual((c["stdout"], c["exit_code"]), ("ABC\n", 0))

        s = t.exec_command("echo quick")
        self.assertIn("quick", s["stdout"])
        s = t.exec_command("read line; echo got $line", grace_seconds=0.2)
        self.assertTrue(s["alive"])
        s2 = t.write_stdin(s["session_id"], "ping\n", wait_seconds=5)
        self.assertIn("got ping", s2["stdout"])

    def test_bad_calls(self) -> None:
        with self.assertRaises(NotFoundError) as cm:
            self.sb.tools.call("no_such_tool")
        self.assertIn("no_such_tool", str(cm.exception))
        with self.assertRaises(InvalidArgumentError) as ia:
            self.sb.tools.repl_execute("1", timeout_seconds=0)
        self.assertEqual(ia.exception.field, "timeout_seconds")
        with self.assertRaises(InvalidArgumentError) as ia2:
            self.sb.tools.call("edit_file", file_path="a.py", old_strin="x", new_string="y")
        self.assertIn("old_strin", str(ia2.exception))
        self.sb.files.write_text("amb.txt", "dup\ndup\n")
        with self.assertRaises(InvalidArgumentError):
            self.sb.tools.edit_file("amb.txt", "dup", "one")
        self.assertEqual(self.sb.files.read_text("amb.txt"), "dup\ndup\n")  # nothing written
