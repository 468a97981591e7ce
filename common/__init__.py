"""What both commands stand on, and every layer below them may use: the command line and the terminal (`cli`), the
training settings (`settings`), the files a command reads and writes (`files`), the errors a user is shown
(`errors`), the parsing of what users and disks give (`parsing`) and the CPU threads a run takes (`cores`). None of
them imports the model, the data, the trainer or the watch."""
