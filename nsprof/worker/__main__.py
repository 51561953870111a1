import sys

if len(sys.argv) == 3 and sys.argv[1] == "--serve":  # the long-lived worker of `nsprof serve`
    from pathlib import Path

    from nsprof.worker.serving import serve

    sys.exit(serve(Path(sys.argv[2])))

from nsprof.worker.program import main  # noqa: E402

main()
