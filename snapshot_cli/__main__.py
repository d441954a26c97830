from snapshot_cli.entry import main

if __name__ == "__main__":
    main()
