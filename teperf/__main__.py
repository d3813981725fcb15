from teperf.cli import main

main()
