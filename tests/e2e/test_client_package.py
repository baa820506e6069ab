"""The browser client as a package, the way apps resolve it: its React entry point has types under
TypeScript's classic ``node10`` resolution too (``typesVersions``), not only ``bundler``/``node16``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.processes import REPO_ROOT

WEB = REPO_ROOT / "web"
APP = """
import { TaskStatusClient, type ConnectionState } from '@task-status-observer/client';
import { useConnectionState } from '@task-status-observer/client/react';
const client = new TaskStatusClient({ getUserToken: () => 'token' });
export const state: ConnectionState = client.state;
export { useConnectionState };
"""


def test_both_entry_points_type_check_under_node10_resolution(tmp_path: Path) -> None:
    assert (WEB / "lib" / "react.d.ts").is_file(), "the library is not built: scripts/web build"
    modules = tmp_path / "node_modules"
    (modules / "@task-status-observer").mkdir(parents=True)
    (modules / "@task-status-observer" / "client").symlink_to(WEB)
    for dependency in ("react", "@types", "centrifuge"):
        (modules / dependency).symlink_to(WEB / "node_modules" / dependency)
    (tmp_path / "app.ts").write_text(APP)
    options = (
        '{"compilerOptions": {"module": "commonjs", "moduleResolution": "node10", "strict": true, "noEmit": true,'
        ' "skipLibCheck": true, "target": "es2022", "lib": ["es2022", "dom"]}, "files": ["app.ts"]}'
    )
    (tmp_path / "tsconfig.json").write_text(options)
    checked = subprocess.run(
        [str(WEB / "node_modules" / ".bin" / "tsc"), "-p", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
