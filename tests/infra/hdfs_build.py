"""Building the HDFS test harness (Hadoop 2.7.3 server jars and libhdfs), once per cache.

``ensure_built()`` assembles the server and the native client once per cache directory, from
package-registry content only (no Hadoop tarball can be downloaded here):

- pyspark==2.4.8's sdist ships hadoop-hdfs-2.7.3.jar with the server classes and their
  dependencies (later pyspark releases ship only the shaded client). Its metadata needs an old
  setuptools, so ``pip download`` runs from a small venv with setuptools<70.
- Debian's jersey 1 packages (``apt-get download``, unpacked with ``dpkg-deb -x``, never
  installed) serve WebHDFS.
- pydoop==2.0.0's sdist ships the C sources of libhdfs; compiled against the JDK they give the
  ``libhdfs.so`` that ``pyarrow.fs.HadoopFileSystem`` loads.

Needs a JDK (17 works; javac and jni.h for libhdfs), gcc, apt-get and dpkg-deb, and pip access
to PyPI. :mod:`tests.infra.hdfs` starts clusters from the build (and re-exports its names).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from string import Template
from typing import Any

#: Name of the finished build inside the cache directory: bump the suffix when the recipe changes,
#: so that older caches are ignored (and rebuilt beside them) rather than reused.
BUILD_NAME = "hadoop-2.7.3-r1"
CACHE_ENV = "SNAP_TEST_CACHE"

PYSPARK = ("pyspark", "2.4.8")
PYDOOP = ("pydoop", "2.0.0")
#: The jars of pyspark 2.4.8's sdist that the NameNode, DataNode and libhdfs client need.
SPARK_JARS = (
    "activation-1.1.1",
    "apache-log4j-extras-1.2.17",
    "commons-cli-1.2",
    "commons-codec-1.10",
    "commons-collections-3.2.2",
    "commons-compress-1.20",
    "commons-configuration-1.6",
    "commons-httpclient-3.1",
    "commons-io-2.4",
    "commons-lang-2.6",
    "commons-logging-1.1.3",
    "commons-math3-3.4.1",
    "commons-net-3.1",
    "guava-14.0.1",
    "hadoop-annotations-2.7.3",
    "hadoop-auth-2.7.3",
    "hadoop-common-2.7.3",
    "hadoop-hdfs-2.7.3",
    "hadoop-mapreduce-client-core-2.7.3",
    "htrace-core-3.1.0-incubating",
    "httpclient-4.5.6",
    "httpcore-4.4.10",
    "jackson-core-asl-1.9.13",
    "jackson-mapper-asl-1.9.13",
    "javax.annotation-api-1.2",
    "javax.servlet-api-3.1.0",
    "jaxb-api-2.2.2",
    "jcl-over-slf4j-1.7.16",
    "jetty-6.1.26",
    "jetty-util-6.1.26",
    "jsr305-1.3.9",
    "log4j-1.2.17",
    "netty-all-4.1.47.Final",
    "osgi-resource-locator-1.0.1",
    "protobuf-java-2.5.0",
    "slf4j-api-1.7.16",
    "slf4j-log4j12-1.7.16",
    "xercesImpl-2.9.1",
    "xmlenc-0.52",
)
DEB_PACKAGES = (
    "libjersey1-core-java",
    "libjersey1-server-java",
    "libjersey1-servlet-java",
    "libjsr311-api-java",
)
DEB_JARS = ("jersey1-core.jar", "jersey1-server.jar", "jersey1-servlet.jar", "jsr311-api-1.1.1.jar")
#: HttpServer2 looks these up on the classpath (webapps/NAME); empty directories are enough.
WEBAPPS = ("hdfs", "datanode", "secondary", "static")
LIBHDFS_SOURCES = (
    "hdfs.c",
    "jni_helper.c",
    "exception.c",
    "common/htable.c",
    "os/posix/mutexes.c",
    "os/posix/thread.c",
    "os/posix/thread_local_storage.c",
)

_CORE_SITE = """<?xml version="1.0"?>
<configuration>
  <property><name>fs.defaultFS</name><value>hdfs://${host}:${nn_rpc}</value></property>
  <property><name>hadoop.tmp.dir</name><value>${workdir}/tmp</value></property>
  <property><name>hadoop.security.authentication</name><value>simple</value></property>
</configuration>
"""
_HDFS_SITE = """<?xml version="1.0"?>
<configuration>
  <property><name>dfs.namenode.name.dir</name><value>file://${workdir}/name</value></property>
  <property><name>dfs.datanode.data.dir</name><value>file://${workdir}/data</value></property>
  <property><name>dfs.replication</name><value>1</value></property>
  <property><name>dfs.permissions.enabled</name><value>false</value></property>
  <property><name>dfs.namenode.rpc-address</name><value>${host}:${nn_rpc}</value></property>
  <property><name>dfs.namenode.http-address</name><value>${host}:${nn_http}</value></property>
  <property><name>dfs.namenode.https-address</name><value>${host}:0</value></property>
  <property>
    <name>dfs.namenode.secondary.http-address</name><value>${host}:${snn_http}</value>
  </property>
  <property><name>dfs.datanode.address</name><value>${host}:${dn_data}</value></property>
  <property><name>dfs.datanode.http.address</name><value>${host}:${dn_http}</value></property>
  <property><name>dfs.datanode.https.address</name><value>${host}:0</value></property>
  <property><name>dfs.datanode.ipc.address</name><value>${host}:${dn_ipc}</value></property>
  <property><name>dfs.datanode.hostname</name><value>${host}</value></property>
  <property>
    <name>dfs.namenode.datanode.registration.ip-hostname-check</name><value>false</value>
  </property>
  <property><name>dfs.client.use.datanode.hostname</name><value>false</value></property>
  <property><name>dfs.webhdfs.enabled</name><value>true</value></property>
  <property><name>dfs.namenode.safemode.extension</name><value>0</value></property>
  <property><name>dfs.blocksize</name><value>4194304</value></property>
  <property><name>dfs.namenode.fs-limits.min-block-size</name><value>1024</value></property>
  <property><name>dfs.heartbeat.interval</name><value>1</value></property>
</configuration>
"""
#: The client's configuration holds no address, so one CLASSPATH serves every cluster started
#: from the same build (a process can start only one JVM, and so has only one CLASSPATH).
_CLIENT_CORE_SITE = """<?xml version="1.0"?>
<configuration>
  <property><name>hadoop.security.authentication</name><value>simple</value></property>
</configuration>
"""
_CLIENT_HDFS_SITE = """<?xml version="1.0"?>
<configuration>
  <property><name>dfs.replication</name><value>1</value></property>
  <property><name>dfs.blocksize</name><value>4194304</value></property>
  <property><name>dfs.client.use.datanode.hostname</name><value>false</value></property>
  <property>
    <name>dfs.client.block.write.replace-datanode-on-failure.enable</name><value>false</value>
  </property>
</configuration>
"""
_LOG4J = """log4j.rootLogger=${level},console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{HH:mm:ss,SSS} %p %c{1}: %m%n
"""


class HdfsBuildError(RuntimeError):
    """A step of ``ensure_built`` failed; the message names the step and shows its output."""


# --------------------------------------------------------------------------------------------
# Build (once per cache directory)
# --------------------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``$SNAP_TEST_CACHE/hdfs`` if that is set, else ``~/.cache/snap-tests/hdfs``."""
    base = os.environ.get(CACHE_ENV)
    return (Path(base) if base else Path.home() / ".cache" / "snap-tests") / "hdfs"


def find_java_home() -> Path:
    """A JDK with ``include/jni.h`` and ``lib/server/libjvm.so``: $JAVA_HOME, else javac's."""
    candidates: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]))
    for tool in ("javac", "java"):
        exe = shutil.which(tool)
        if exe:
            candidates.append(Path(exe).resolve().parent.parent)
    for home in candidates:
        if (home / "include" / "jni.h").is_file() and (home / "lib/server/libjvm.so").is_file():
            return home
    raise HdfsBuildError(
        "HDFS build step 'find a JDK' failed: no JDK with include/jni.h and lib/server/libjvm.so"
        f" among {[str(c) for c in candidates]} (set JAVA_HOME, or install a JDK such as"
        " openjdk-17-jdk-headless)"
    )


def ensure_built(cache_dir: Path | None = None) -> Path:
    """Build the jars, libhdfs.so and configuration templates once; return the build directory.

    Safe to call from several processes at once (an flock on ``CACHE/.build.lock``) and atomic:
    everything is built under ``CACHE/.build-*`` and renamed to ``CACHE/BUILD_NAME`` only when
    complete, so an interrupted build is never taken for a finished one (it is deleted by the
    next build). Takes about 20-30 s and ~250 MB of transient downloads; keeps ~35 MB.
    """
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = cache / BUILD_NAME
    if _is_complete(final):
        return final
    cache.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(cache / ".build.lock"):
        if _is_complete(final):  # another process finished it while this one waited
            return final
        for stale in cache.glob(".build-*"):  # interrupted builds: nobody else holds the lock
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():  # unusable (e.g. its JDK is gone): set aside, then delete
            trash = cache / f".build-stale-{os.getpid()}"
            final.rename(trash)
            shutil.rmtree(trash, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
        os.chmod(work, 0o755)  # apt-get download drops to the _apt user where it can
        try:
            _build(work / "out", work / "dl")
            os.rename(work / "out", final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final


def _read_build(build_dir: Path) -> dict[str, Any]:
    info: dict[str, Any] = json.loads((build_dir / "BUILD.json").read_text())
    return info


def _is_complete(build_dir: Path) -> bool:
    try:
        info = _read_build(build_dir)
    except (OSError, ValueError):
        return False
    java_home = Path(info.get("java_home", "/nonexistent"))
    needed = [
        java_home / "bin" / "java",
        java_home / "lib" / "server" / "libjvm.so",
        build_dir / "native" / "libhdfs.so",
        *(build_dir / "lib" / jar for jar in info.get("jars", [])),
    ]
    return info.get("name") == BUILD_NAME and all(p.exists() for p in needed)


@contextlib.contextmanager
def _exclusive_lock(path: Path, timeout: float = 1800.0) -> Iterator[None]:
    with open(path, "a+b") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise HdfsBuildError(
                        f"HDFS build: waited {timeout:.0f} s for the lock {path}, held by"
                        " another process that is building (or hung while building)"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _tail(text: str | bytes | None, lines: int = 40) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _build_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {"VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "PIP_TARGET", "PIP_PREFIX", "PIP_USER"}
    }
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", LC_ALL="C")
    return env


def _run(
    step: str,
    cmd: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    timeout: float = 900.0,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    args = [str(c) for c in cmd]
    try:
        proc = subprocess.run(
            args,
            cwd=cwd,
            env=_build_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise HdfsBuildError(f"HDFS build step '{step}' failed: cannot run {args[0]!r}") from exc
    except subprocess.TimeoutExpired as exc:
        raise HdfsBuildError(
            f"HDFS build step '{step}' timed out after {timeout:.0f} s: {shlex.join(args)}\n"
            f"--- stderr (tail) ---\n{_tail(exc.stderr)}"
        ) from None
    if check and proc.returncode != 0:
        raise HdfsBuildError(
            f"HDFS build step '{step}' failed (exit {proc.returncode}): {shlex.join(args)}\n"
            f"--- stderr (tail) ---\n{_tail(proc.stderr)}\n"
            f"--- stdout (tail) ---\n{_tail(proc.stdout, 10)}"
        )
    return proc


def _build(out: Path, dl: Path) -> None:
    started = time.monotonic()
    java_home = find_java_home()
    for sub in ("lib", "native", "templates", "client-conf"):
        (out / sub).mkdir(parents=True)
    for app in WEBAPPS:
        (out / "res" / "webapps" / app).mkdir(parents=True)
    dl.mkdir(parents=True)

    venv = dl / "pip-venv"
    _run("create a venv for pip download", [sys.executable, "-m", "venv", venv])
    vpy = venv / "bin" / "python"
    _run(
        "install setuptools<70 into that venv",
        [vpy, "-m", "pip", "install", "--quiet", "setuptools<70", "wheel"],
    )
    spark_sdist = _pip_download(vpy, *PYSPARK, dl)
    _extract_spark_jars(spark_sdist, out / "lib")
    _debian_jars(dl / "deb", out / "lib")
    pydoop_sdist = _pip_download(vpy, *PYDOOP, dl)
    _compile_libhdfs(pydoop_sdist, dl, java_home, out / "native" / "libhdfs.so")
    _write_confs(out)

    jars = sorted(p.name for p in (out / "lib").glob("*.jar"))
    version = _run(
        "check the jars run (hadoop VersionInfo)",
        [java_home / "bin/java", "-cp", f"{out / 'lib'}/*", "org.apache.hadoop.util.VersionInfo"],
        timeout=120,
    ).stdout
    if "Hadoop 2.7.3" not in version:
        raise HdfsBuildError(f"HDFS build step 'check the jars run': unexpected output\n{version}")
    info = {
        "name": BUILD_NAME,
        "java_home": str(java_home),
        "jars": jars,
        "build_seconds": round(time.monotonic() - started, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (out / "BUILD.json").write_text(json.dumps(info, indent=2) + "\n")


def _pip_download(vpy: Path, name: str, version: str, dest: Path) -> Path:
    _run(
        f"pip download {name}=={version} (sdist)",
        [
            vpy,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-binary",
            ":all:",
            f"{name}=={version}",
            "-d",
            dest,
        ],
    )
    sdist = dest / f"{name}-{version}.tar.gz"
    if not sdist.is_file():
        found = sorted(p.name for p in dest.iterdir())
        raise HdfsBuildError(
            f"HDFS build step 'pip download {name}=={version}': no {sdist.name} in {found}"
        )
    return sdist


def _copy_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> None:
    source = tar.extractfile(member)
    if source is None:
        raise HdfsBuildError(f"HDFS build: {member.name} in {tar.name!r} is not a regular file")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with source, open(dest, "wb") as target:
        shutil.copyfileobj(source, target)


def _extract_spark_jars(sdist: Path, lib: Path) -> None:
    prefix = f"{PYSPARK[0]}-{PYSPARK[1]}/deps/jars/"
    wanted = {f"{prefix}{jar}.jar" for jar in SPARK_JARS}
    found: set[str] = set()
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            for member in tar:
                if member.name in wanted and member.isfile():
                    _copy_member(tar, member, lib / PurePosixPath(member.name).name)
                    found.add(member.name)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise HdfsBuildError(f"HDFS build step 'unpack jars from {sdist.name}': {exc}") from exc
    if missing := sorted(wanted - found):
        raise HdfsBuildError(f"HDFS build step 'unpack jars from {sdist.name}': missing {missing}")


def _debian_jars(deb_dir: Path, lib: Path) -> None:
    deb_dir.mkdir(parents=True)
    download = ["apt-get", "download", "-q", *DEB_PACKAGES]
    proc = _run("apt-get download jersey 1", download, cwd=deb_dir, check=False)
    if proc.returncode != 0 and os.geteuid() == 0:
        # A fresh machine has no package lists yet: update them once and try again.
        _run("apt-get update (before apt-get download)", ["apt-get", "update", "-q"])
        proc = _run("apt-get download jersey 1", download, cwd=deb_dir, check=False)
    if proc.returncode != 0:
        raise HdfsBuildError(
            f"HDFS build step 'apt-get download jersey 1' failed (exit {proc.returncode}):"
            f" {shlex.join(download)} (as root, run 'apt-get update' first)\n"
            f"--- stderr (tail) ---\n{_tail(proc.stderr)}"
        )
    root = deb_dir / "root"
    for deb in sorted(deb_dir.glob("*.deb")):
        _run(f"unpack {deb.name}", ["dpkg-deb", "-x", deb, root])
    java_dir = root / "usr" / "share" / "java"
    for jar in DEB_JARS:
        real = Path(os.path.realpath(java_dir / jar))  # some names are relative symlinks
        if not real.is_file() or not real.is_relative_to(root.resolve()):
            have = sorted(p.name for p in java_dir.glob("*")) if java_dir.is_dir() else []
            raise HdfsBuildError(
                f"HDFS build step 'unpack jersey 1': no {jar} in the packages (found {have})"
            )
        shutil.copyfile(real, lib / jar)


def _compile_libhdfs(sdist: Path, dl: Path, java_home: Path, target: Path) -> None:
    prefix = f"{PYDOOP[0]}-{PYDOOP[1]}/src/libhdfs/"
    src = dl / "libhdfs"
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            for member in tar:
                rel = member.name[len(prefix) :]
                if member.name.startswith(prefix) and member.isfile() and ".." not in rel:
                    _copy_member(tar, member, src / rel)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise HdfsBuildError(f"HDFS build step 'unpack libhdfs from {sdist.name}': {exc}") from exc
    if not (src / "hdfs.c").is_file():
        raise HdfsBuildError(f"HDFS build step 'unpack libhdfs': no {prefix}hdfs.c in {sdist}")
    jvm_lib = java_home / "lib" / "server"
    compiler = os.environ.get("CC") or shutil.which("gcc") or "cc"
    cmd: list[str | Path] = [
        compiler,
        "-O2",
        "-fPIC",
        "-shared",
        "-o",
        target,
        "-D_GNU_SOURCE",
        *(f"-I{d}" for d in (".", "include", "os", "os/posix", "common")),
        f"-I{java_home / 'include'}",
        f"-I{java_home / 'include' / 'linux'}",
        *LIBHDFS_SOURCES,
        f"-L{jvm_lib}",
        "-ljvm",
        f"-Wl,-rpath,{jvm_lib}",
        "-lpthread",
    ]
    _run("compile libhdfs.so", cmd, cwd=src, timeout=300)
    _run(
        "load the compiled libhdfs.so",
        [sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", target],
        timeout=60,
    )


def _write_confs(out: Path) -> None:
    (out / "templates" / "core-site.xml").write_text(_CORE_SITE)
    (out / "templates" / "hdfs-site.xml").write_text(_HDFS_SITE)
    (out / "templates" / "log4j.properties").write_text(_LOG4J)
    client = out / "client-conf"
    (client / "core-site.xml").write_text(_CLIENT_CORE_SITE)
    (client / "hdfs-site.xml").write_text(_CLIENT_HDFS_SITE)
    (client / "log4j.properties").write_text(
        Template(_LOG4J).substitute(level="WARN")
        # Noise on every client: no native hadoop library; and Hadoop 2.7's DataStreamer logs
        # a harmless InterruptedException when it closes a block (HDFS-10429).
        + "log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR\n"
        + "log4j.logger.org.apache.hadoop.hdfs.DFSClient=ERROR\n"
    )
