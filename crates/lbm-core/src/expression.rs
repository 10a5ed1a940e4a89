//! Arithmetic expressions of a point (x, y), for a case's initial field.
//!
//! The grammar is the usual one: numbers (`1`, `0.5`, `2e-3`), the
//! variables `x` and `y`, the constants `pi` and `e`, `+ - * /`, `^` (or
//! `**`) for powers (right-associative, above unary minus: `-x^2` is
//! `-(x^2)`), parentheses, and the functions of [`FUNCTIONS`]. It is parsed
//! once into a tree and evaluated in f64 at every cell.

use std::fmt;

/// Every function an expression may call: its name, its number of
/// arguments (`None`: two or more) and what it computes.
pub const FUNCTIONS: [(&str, Option<usize>, Function); 22] = [
    ("sin", Some(1), Function::One(f64::sin)),
    ("cos", Some(1), Function::One(f64::cos)),
    ("tan", Some(1), Function::One(f64::tan)),
    ("asin", Some(1), Function::One(f64::asin)),
    ("acos", Some(1), Function::One(f64::acos)),
    ("atan", Some(1), Function::One(f64::atan)),
    ("atan2", Some(2), Function::Two(f64::atan2)),
    ("sinh", Some(1), Function::One(f64::sinh)),
    ("cosh", Some(1), Function::One(f64::cosh)),
    ("tanh", Some(1), Function::One(f64::tanh)),
    ("exp", Some(1), Function::One(f64::exp)),
    ("ln", Some(1), Function::One(f64::ln)),
    ("log", Some(1), Function::One(f64::ln)),
    ("log10", Some(1), Function::One(f64::log10)),
    ("sqrt", Some(1), Function::One(f64::sqrt)),
    ("abs", Some(1), Function::One(f64::abs)),
    ("sign", Some(1), Function::One(sign)),
    ("floor", Some(1), Function::One(f64::floor)),
    ("ceil", Some(1), Function::One(f64::ceil)),
    ("pow", Some(2), Function::Two(f64::powf)),
    ("min", None, Function::Fold(smaller)),
    ("max", None, Function::Fold(larger)),
];

/// A function of [`FUNCTIONS`], as the evaluation calls it.
#[derive(Clone, Copy, Debug)]
pub enum Function {
    One(fn(f64) -> f64),
    Two(fn(f64, f64) -> f64),
    /// Folded over two or more arguments.
    Fold(fn(f64, f64) -> f64),
}

/// 0 at 0, as numpy's.
fn sign(v: f64) -> f64 {
    if v == 0.0 { 0.0 } else { v.signum() }
}

// NaN in, NaN out: f64::min and f64::max would drop it.
fn smaller(a: f64, b: f64) -> f64 {
    if a.is_nan() || a < b { a } else { b }
}

fn larger(a: f64, b: f64) -> f64 {
    if a.is_nan() || a > b { a } else { b }
}

/// The longest expression accepted, in characters.
pub const MAX_LENGTH: usize = 4096;

/// How deep parentheses, function calls, signs and exponents may nest: the
/// parser and the evaluation recurse once per level.
pub const MAX_DEPTH: usize = 64;

/// A parsed expression and the text it came from.
#[derive(Clone, Debug)]
pub struct Expression {
    text: String,
    tree: Node,
}

/// Why a text is not an expression: what was expected, at which character
/// (counted from 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub at: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at character {}: {}", self.at, self.message)
    }
}

#[derive(Clone, Debug)]
enum Node {
    Number(f64),
    X,
    Y,
    Negate(Box<Node>),
    Binary(Op, Box<Node>, Box<Node>),
    Call(usize, Vec<Node>),
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Add,
    Subtract,
    Multiply,
    Divide,
    Power,
}

impl Expression {
    pub fn parse(text: &str) -> Result<Expression, ParseError> {
        let length = text.chars().count();
        if length > MAX_LENGTH {
            return Err(ParseError {
                at: MAX_LENGTH + 1,
                message: format!("the expression is {length} characters long; at most {MAX_LENGTH} are accepted"),
            });
        }
        let tokens = tokenize(text)?;
        let mut parser = Parser {
            tokens: &tokens,
            next: 0,
            end: length + 1,
            depth: 0,
        };
        let tree = parser.sum()?;
        match parser.peek() {
            None => Ok(Expression {
                text: text.to_string(),
                tree,
            }),
            Some((at, token)) => Err(ParseError {
                at,
                message: format!("unexpected {token} (an operator or the end was expected)"),
            }),
        }
    }

    /// A constant as an expression.
    pub fn constant(value: f64) -> Expression {
        Expression {
            text: value.to_string(),
            tree: Node::Number(value),
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn eval(&self, x: f64, y: f64) -> f64 {
        eval(&self.tree, x, y)
    }
}

impl serde::Serialize for Expression {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

fn eval(node: &Node, x: f64, y: f64) -> f64 {
    match node {
        Node::Number(v) => *v,
        Node::X => x,
        Node::Y => y,
        Node::Negate(a) => -eval(a, x, y),
        Node::Binary(op, a, b) => {
            let (a, b) = (eval(a, x, y), eval(b, x, y));
            match op {
                Op::Add => a + b,
                Op::Subtract => a - b,
                Op::Multiply => a * b,
                Op::Divide => a / b,
                Op::Power => a.powf(b),
            }
        }
        Node::Call(f, args) => match FUNCTIONS[*f].2 {
            Function::One(f) => f(eval(&args[0], x, y)),
            Function::Two(f) => f(eval(&args[0], x, y), eval(&args[1], x, y)),
            Function::Fold(f) => args[1..]
                .iter()
                .fold(eval(&args[0], x, y), |acc, a| f(acc, eval(a, x, y))),
        },
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Number(f64),
    Name(String),
    Symbol(char),
    /// `^` or `**`, as written.
    Power(&'static str),
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Number(v) => write!(f, "number {v}"),
            Token::Name(n) => write!(f, "`{n}`"),
            Token::Symbol(c) => write!(f, "`{c}`"),
            Token::Power(p) => write!(f, "`{p}`"),
        }
    }
}

/// The tokens of `text`, each with the character it starts at (from 1).
fn tokenize(text: &str) -> Result<Vec<(usize, Token)>, ParseError> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at = i + 1;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            // An exponent only where digits follow it (`2e` is a number and
            // then a name, refused as such).
            if i < chars.len() && matches!(chars[i], 'e' | 'E') {
                let mut j = i + 1;
                if j < chars.len() && matches!(chars[j], '+' | '-') {
                    j += 1;
                }
                if j < chars.len() && chars[j].is_ascii_digit() {
                    i = j;
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let literal: String = chars[start..i].iter().collect();
            let value = literal.parse::<f64>().map_err(|_| ParseError {
                at,
                message: format!("`{literal}` is not a number"),
            })?;
            tokens.push((at, Token::Number(value)));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push((at, Token::Name(chars[start..i].iter().collect())));
        } else if c == '*' && chars.get(i + 1) == Some(&'*') {
            tokens.push((at, Token::Power("**")));
            i += 2;
        } else if c == '^' {
            tokens.push((at, Token::Power("^")));
            i += 1;
        } else if "+-*/(),".contains(c) {
            tokens.push((at, Token::Symbol(c)));
            i += 1;
        } else {
            return Err(ParseError {
                at,
                message: format!(
                    "`{c}` is not part of an expression (numbers, x, y, pi, e, + - * / ^, parentheses and functions are)"
                ),
            });
        }
    }
    Ok(tokens)
}

struct Parser<'a> {
    tokens: &'a [(usize, Token)],
    next: usize,
    /// The character after the text, where "the end" is.
    end: usize,
    /// How many `unary` calls are open.
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<(usize, &Token)> {
        self.tokens.get(self.next).map(|(at, t)| (*at, t))
    }

    fn at(&self) -> usize {
        self.peek().map_or(self.end, |(at, _)| at)
    }

    fn eat(&mut self, symbol: char) -> bool {
        let found = matches!(self.peek(), Some((_, Token::Symbol(c))) if *c == symbol);
        self.next += usize::from(found);
        found
    }

    fn expect(&mut self, symbol: char, what: &str) -> Result<(), ParseError> {
        match self.eat(symbol) {
            true => Ok(()),
            false => Err(ParseError {
                at: self.at(),
                message: format!("`{symbol}` expected {what}, found {}", self.found()),
            }),
        }
    }

    fn found(&self) -> String {
        self.peek().map_or("the end".into(), |(_, t)| t.to_string())
    }

    fn sum(&mut self) -> Result<Node, ParseError> {
        let mut node = self.product()?;
        loop {
            let op = match () {
                _ if self.eat('+') => Op::Add,
                _ if self.eat('-') => Op::Subtract,
                _ => return Ok(node),
            };
            node = Node::Binary(op, Box::new(node), Box::new(self.product()?));
        }
    }

    fn product(&mut self) -> Result<Node, ParseError> {
        let mut node = self.unary()?;
        loop {
            let op = match () {
                _ if self.eat('*') => Op::Multiply,
                _ if self.eat('/') => Op::Divide,
                _ => return Ok(node),
            };
            node = Node::Binary(op, Box::new(node), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<Node, ParseError> {
        // Every nesting (parentheses, a call's arguments, a sign, an
        // exponent) passes here, and the whole expression once, which is
        // not a nesting.
        if self.depth == MAX_DEPTH + 1 {
            return Err(ParseError {
                at: self.at(),
                message: format!("nested more than {MAX_DEPTH} deep (parentheses, calls, signs and powers)"),
            });
        }
        self.depth += 1;
        let node = if self.eat('-') {
            self.unary().map(|n| Node::Negate(Box::new(n)))
        } else if self.eat('+') {
            self.unary()
        } else {
            self.power()
        };
        self.depth -= 1;
        node
    }

    fn power(&mut self) -> Result<Node, ParseError> {
        let base = self.atom()?;
        if matches!(self.peek(), Some((_, Token::Power(_)))) {
            self.next += 1;
            // Right-associative, and the exponent may carry its own sign.
            return Ok(Node::Binary(Op::Power, Box::new(base), Box::new(self.unary()?)));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Node, ParseError> {
        let at = self.at();
        let Some((_, token)) = self.peek() else {
            return Err(ParseError {
                at,
                message: "a number, x, y, a function or `(` expected, found the end".into(),
            });
        };
        let token = token.clone();
        self.next += 1;
        match token {
            Token::Number(v) => Ok(Node::Number(v)),
            Token::Symbol('(') => {
                let inner = self.sum()?;
                self.expect(')', "to close the `(`")?;
                Ok(inner)
            }
            Token::Name(name) => match name.as_str() {
                "x" => Ok(Node::X),
                "y" => Ok(Node::Y),
                "pi" => Ok(Node::Number(std::f64::consts::PI)),
                "e" => Ok(Node::Number(std::f64::consts::E)),
                _ => {
                    let Some(f) = FUNCTIONS.iter().position(|(n, _, _)| *n == name) else {
                        return Err(ParseError {
                            at,
                            message: format!(
                                "unknown name `{name}`: the variables are x and y (m), the constants pi and e, the \
                                 functions {}",
                                FUNCTIONS.map(|(n, _, _)| n).join(", ")
                            ),
                        });
                    };
                    self.expect('(', &format!("after the function `{name}`"))?;
                    let mut args = vec![self.sum()?];
                    while self.eat(',') {
                        args.push(self.sum()?);
                    }
                    self.expect(')', &format!("to close `{name}(`"))?;
                    let arity = FUNCTIONS[f].1;
                    let fits = arity.map_or(args.len() >= 2, |n| args.len() == n);
                    if !fits {
                        return Err(ParseError {
                            at,
                            message: format!(
                                "`{name}` takes {}, not {}",
                                match arity {
                                    Some(1) => "one argument".to_string(),
                                    Some(n) => format!("{n} arguments"),
                                    None => "two or more arguments".to_string(),
                                },
                                args.len()
                            ),
                        });
                    }
                    Ok(Node::Call(f, args))
                }
            },
            other => Err(ParseError {
                at,
                message: format!("a number, x, y, a function or `(` expected, found {other}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, x: f64, y: f64) -> f64 {
        Expression::parse(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .eval(x, y)
    }

    #[test]
    fn expressions_follow_the_usual_precedence() {
        let (x, y) = (0.3f64, -1.7f64);
        for (text, expected) in [
            ("1 + 2 * 3", 7.0),
            ("(1 + 2) * 3", 9.0),
            ("2 ^ 3 ^ 2", 512.0),
            ("2 ** 3", 8.0),
            ("-2 ^ 2", -4.0),
            ("2 ^ -1", 0.5),
            ("8 / 4 / 2", 1.0),
            ("1 - 2 - 3", -4.0),
            ("2e-3 * 1E3", 2.0),
            (".5 + 1.", 1.5),
            ("--x", x),
            ("x * y", x * y),
            (
                "sin(2 * pi * x) * cos(y)",
                (2.0 * std::f64::consts::PI * x).sin() * y.cos(),
            ),
            ("atan2(y, x)", y.atan2(x)),
            ("min(x, y, 0)", y),
            ("max(x, y)", x),
            ("pow(x, 2) + sqrt(abs(y))", x.powi(2) + y.abs().sqrt()),
            ("sign(0) + sign(y) + floor(y) + ceil(x)", -1.0 - 2.0 + 1.0),
            ("exp(ln(3)) + log(e) + log10(100)", 3.0 + 1.0 + 2.0),
            ("tanh(x) - sinh(x) / cosh(x)", x.tanh() - x.sinh() / x.cosh()),
        ] {
            let got = value(text, x, y);
            assert!(
                (got - expected).abs() <= 1e-12 * expected.abs().max(1.0),
                "{text}: {got} != {expected}"
            );
        }
        assert!(value("sqrt(y)", x, y).is_nan());
        assert!(value("min(1, sqrt(y))", x, y).is_nan());
        assert!(value("1 / (x - x)", x, y).is_infinite());
    }

    #[test]
    fn nesting_and_length_are_bounded_before_the_stack_is() {
        let nested = |n: usize| format!("{}x{}", "(".repeat(n), ")".repeat(n));
        // Each parenthesis level is one `unary` level, the whole expression one more.
        assert_eq!(value(&nested(MAX_DEPTH), 2.0, 0.0), 2.0);
        let calls = format!("{}x{}", "abs(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert_eq!(value(&calls, -2.0, 0.0), 2.0);
        assert_eq!(value(&format!("{}x", "-".repeat(MAX_DEPTH)), 2.0, 0.0), 2.0);
        let e = Expression::parse(&nested(MAX_DEPTH + 1)).unwrap_err();
        assert!(e.message.contains("nested more than 64 deep"), "{e}");
        let e = Expression::parse(&nested(5200)).unwrap_err();
        assert!(e.message.contains("characters long; at most 4096"), "{e}");
        assert!(Expression::parse(&"-".repeat(100)).is_err());
        // A flat sum as long as accepted: its tree is 2048 deep along one side.
        let sum = vec!["x"; 2048].join("+");
        assert_eq!(sum.len(), 4095);
        assert_eq!(value(&sum, 1.0, 0.0), 2048.0);
    }

    #[test]
    fn malformed_expressions_say_where_and_what() {
        for (text, at, says) in [
            ("", 1, "found the end"),
            ("1 +", 4, "found the end"),
            ("sin(x", 6, "`)` expected to close `sin(`"),
            ("(x + 1", 7, "`)` expected to close the `(`"),
            ("z + 1", 1, "unknown name `z`: the variables are x and y"),
            ("sin x", 5, "`(` expected after the function `sin`"),
            ("atan2(x)", 1, "`atan2` takes 2 arguments, not 1"),
            ("max(x)", 1, "two or more arguments"),
            ("sin(x, y)", 1, "`sin` takes one argument, not 2"),
            ("x y", 3, "unexpected `y`"),
            ("2 $ 3", 3, "`$` is not part of an expression"),
            ("1.2.3", 1, "`1.2.3` is not a number"),
            ("x * * y", 5, "found `*`"),
            ("2e", 2, "unexpected `e`"),
            ("2 x", 3, "unexpected `x`"),
            ("x**-**2", 5, "found `**`"),
            ("x ^ ^ 2", 5, "found `^`"),
        ] {
            let e = Expression::parse(text).unwrap_err();
            assert_eq!(e.at, at, "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
    }
}
