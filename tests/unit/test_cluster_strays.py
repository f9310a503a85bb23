"""`LoopbackCluster.down` leaves no process behind: after the services, every process whose command line names
the cluster's directory is killed (an Airflow task's `spark-submit` runs in a session of its own and outlived
the scheduler's process group once), and nothing else, not the caller nor its parents."""

import subprocess
import sys
import time

from ticdc_devkit.cluster import kill_strays


def test_kill_strays_kills_what_names_the_directory_and_spares_the_rest(tmp_path):
    directory = tmp_path / "cluster"
    naming = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", str(directory)],
                              start_new_session=True)  # fmt: skip
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    try:
        time.sleep(0.3)
        assert kill_strays(directory) == [naming.pid]
        assert naming.wait(timeout=10) == -9
        assert other.poll() is None
    finally:
        naming.kill()
        other.kill()
