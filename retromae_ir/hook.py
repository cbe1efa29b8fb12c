"""CLI for the Pyserini start-up hook: ``python -m retromae_ir.hook {install,uninstall,show}``."""
import argparse
import sys

from retromae_ir import pyserini_env
from retromae_ir.cli import add_debug_flag, command


@command
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retromae_ir.hook",
                                     description="Java 21+ and offline start-up for Pyserini in this environment.")
    add_debug_flag(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="write the .pth start-up file into this environment's site-packages")
    sub.add_parser("uninstall", help="remove that file")
    sub.add_parser("show", help="print the Java runtime Pyserini will use")
    args = parser.parse_args(argv)
    if args.command == "install":
        print(f"wrote {pyserini_env.write_startup_hook()}")
    elif args.command == "uninstall":
        pyserini_env.hook_path().unlink(missing_ok=True)
        print(f"removed {pyserini_env.hook_path()}")
    else:
        home = pyserini_env.select_java_home()
        modules = pyserini_env.runtime_modules(home)
        vector = modules is None or pyserini_env.VECTOR_MODULE in modules
        print(f"JAVA_HOME={home} (Java {pyserini_env.java_version(home)}); "
              f"{pyserini_env.VECTOR_MODULE}: {'present' if vector else 'absent, JVM option dropped'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
