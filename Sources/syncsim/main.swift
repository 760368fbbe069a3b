import SyncSim
