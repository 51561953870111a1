from nsprof.worker.program import main

main()
