import SyncSim

await SyncSimCommand.main()
