"""The one exception type that the CLI turns into a one-line message and exit 2."""


class TeperfError(Exception):
    """A problem the user can fix. ``problem`` says what is wrong, ``fix`` what to do."""

    exit_code = 2

    def __init__(self, problem: str, fix: str = ""):
        self.problem = problem
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = self.problem.strip().replace("\n", " ")
        if self.fix:
            text += f"; {self.fix.strip()}"
        return text
