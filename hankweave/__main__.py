from hankweave.cli import main

main()
